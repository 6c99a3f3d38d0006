"""LLaMA-3 training steps of `costmodel workloads export` and XLA's partitioning of them.

    python tests/data/sharded/llama_oracle.py OUTDIR CASE...   # CASE: a name of CASES or EXPORTS

For every case this writes `OUTDIR/<case>.mlir`, the exporter's own lowering
(`costmodel.workloads.export.lower_llama`, the text `costmodel workloads export` writes),
and `OUTDIR/<case>.xla.mlirbc`: the same `Lowered` compiled by XLA on 8 host CPU devices,
the HLO right after XLA's `spmd-partitioning` pass (dumped as a proto, converted with
`hlo_to_stablehlo`, as tests/data/sharded/generate.py does), with
`OUTDIR/<case>.xla.groups.json`: each collective's device groups by channel id, read from
the HLO text of the same dump. jaxlib 0.10.2's `hlo_to_stablehlo` drops the `device_ids`
of XLA's mesh-axes replica groups (`mesh['axis_0'=4,'axis_1'=2], device_ids=([2,4]T(1,0))
{'axis_0'}` becomes `replica_group_mesh_axes` over an `sdy.mesh` without device ids),
which names the wrong devices whenever the ids are not in order. The CPU backend's LLVM
optimisation is turned down (`--xla_backend_optimization_level=0`): it runs after the
partitioner and does not change the dump, only the time. The EXPORTS cases are only
lowered (`OUTDIR/<case>.mlir`).

Must run in its own process: it sets XLA_FLAGS before importing jax.
"""

from __future__ import annotations

import glob
import json
import math
import os
import re
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

# name -> (model, mesh, layers, sharding, scan); tiny sequences and batches: the
# collectives' count does not depend on them, their bytes scale with them. One or two
# layers (XLA's CPU compile takes seconds per layer; two show that each layer's weights
# are gathered once, not merged with the other layer's)
SEQ_LEN = 32
CASES = {
    # the paper's setting: FSDP (ZeRO-3) over all devices
    "fsdp": ("llama3-100m", {"dp": 1, "fsdp": 8, "tp": 1}, 2, "shardy", False),
    # 2 x 4: data parallel x FSDP (hybrid sharding)
    "dp_fsdp": ("llama3-100m", {"dp": 2, "fsdp": 4, "tp": 1}, 1, "shardy", False),
    # 2 x 4: FSDP x Megatron tensor parallel (llama3-100m's 9 heads do not split 4 ways)
    "fsdp_tp": ("llama3-200m", {"dp": 1, "fsdp": 2, "tp": 4}, 1, "shardy", False),
    # 2 x 4: data x tensor parallel, Shardy and GSPMD exports
    "dp_tp": ("llama3-200m", {"dp": 2, "fsdp": 1, "tp": 4}, 1, "shardy", False),
    "dp_tp_gspmd": ("llama3-200m", {"dp": 2, "fsdp": 1, "tp": 4}, 1, "gspmd", False),
}
# exported only (no XLA compile): the full-depth paper model, a scanned one, 8B's widths
EXPORTS = {
    "export_100m": ("llama3-100m", {"dp": 2, "fsdp": 2, "tp": 1}, None, "shardy", False),
    "export_scan": ("llama3-100m", {"dp": 1, "fsdp": 4, "tp": 1}, 3, "shardy", True),
    "export_8b": ("llama3-8b", {"dp": 1, "fsdp": 2, "tp": 4}, 1, "shardy", False),
}


def options(case: str):
    from costmodel.workloads.export import LlamaExportOptions

    model, mesh, layers, sharding, scan = {**CASES, **EXPORTS}[case]
    batch = 2 * mesh["dp"] * mesh["fsdp"]
    return LlamaExportOptions(
        model, mesh=dict(mesh), seq_len=SEQ_LEN, global_batch=batch, layers=layers, sharding=sharding, scan=scan
    )


_COLLECTIVE = re.compile(r"= [^=]*? (all-gather|all-reduce|all-to-all|reduce-scatter)(?:-start)?\(")
_CHANNEL = re.compile(r"channel_id=(\d+)")
_EXPLICIT = re.compile(r"replica_groups=\{((?:\{[\d,]*\},?)*)\}")
_IOTA = re.compile(r"replica_groups=\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?")
_MESH = re.compile(
    r"replica_groups=mesh\[([^\]]*)\](?:, device_ids=\((\[[\d,]+\](?:T\([\d,]+\))?|[\d,]+)\))? \{([^}]*)\}"
)


def _iota(dims: list[int], perm: list[int] | None):
    import numpy as np

    arr = np.arange(math.prod(dims)).reshape(dims)
    return arr.transpose(perm) if perm else arr


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def replica_groups(line: str) -> list[list[int]]:
    """The device groups of one HLO collective instruction (text form): explicit
    `{{0,1},{2,3}}`, iota `[2,4]<=[4,2]T(1,0)`, or mesh axes
    `mesh['a'=4,'b'=2], device_ids=([2,4]T(1,0)) {'a'}`."""
    import numpy as np

    m = _MESH.search(line)
    if m:
        axes = [(a.strip().strip("'"), int(n)) for a, n in (x.split("=") for x in m.group(1).split(","))]
        if any(":" in a for a, _ in axes) or ":" in m.group(3):
            raise ValueError(f"sub-axes not handled: {line[:200]}")
        sizes = [n for _, n in axes]
        ids = m.group(2)
        if ids is None:
            devices = np.arange(math.prod(sizes))
        elif ids.startswith("["):
            im = re.fullmatch(r"\[([\d,]+)\](?:T\(([\d,]+)\))?", ids)
            devices = _iota(_ints(im.group(1)), _ints(im.group(2)) if im.group(2) else None).reshape(-1)
        else:
            devices = np.array(_ints(ids))
        names = [a.strip().strip("'") for a in m.group(3).split(",") if a.strip()]
        index = {a: i for i, (a, _) in enumerate(axes)}
        group_dims = [index[a] for a in names]
        other = [i for i in range(len(axes)) if i not in group_dims]
        arr = devices.reshape(sizes).transpose(other + group_dims)
        return arr.reshape(-1, math.prod(sizes[i] for i in group_dims)).tolist()
    m = _IOTA.search(line)
    if m:
        shape = _ints(m.group(1))
        return _iota(_ints(m.group(2)), _ints(m.group(3)) if m.group(3) else None).reshape(shape).tolist()
    m = _EXPLICIT.search(line)
    if m:
        return [_ints(g) for g in re.findall(r"\{([\d,]*)\}", m.group(1))]
    raise ValueError(f"no replica groups in: {line[:200]}")


def channel_groups(hlo_text: str) -> dict[int, list[list[int]]]:
    out = {}
    for line in hlo_text.splitlines():
        if _COLLECTIVE.search(line):
            ch = _CHANNEL.search(line)
            if ch:
                out[int(ch.group(1))] = replica_groups(line)
    return out


def main(argv: list[str]) -> int:
    if len(argv) < 2 or any(c not in CASES and c not in EXPORTS for c in argv[1:]):
        sys.stderr.write(__doc__ + f"\ncases: {', '.join(CASES)}; exported only: {', '.join(EXPORTS)}\n")
        return 2
    outdir = argv[0]
    os.makedirs(outdir, exist_ok=True)
    dump = tempfile.mkdtemp(prefix="llama_spmd_dump_")
    os.environ["XLA_FLAGS"] = " ".join(
        [
            "--xla_force_host_platform_device_count=8",
            f"--xla_dump_to={dump}",
            "--xla_dump_hlo_pass_re=spmd-partitioning",
            "--xla_dump_hlo_as_proto",
            "--xla_dump_hlo_as_text",
            "--xla_backend_optimization_level=0",
            "--xla_llvm_disable_expensive_passes=true",
        ]
    )
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax
    from jax._src.lib import _jax

    sys.path.insert(0, HERE)
    from generate import _hlo_module_proto

    from costmodel.workloads.export import lower_llama

    try:
        for case in argv[1:]:
            opts = options(case)
            lowered = lower_llama(opts, jax.devices("cpu")[: opts.devices])
            with open(os.path.join(outdir, f"{case}.mlir"), "w") as fh:
                fh.write(lowered.as_text())
            if case in EXPORTS:
                continue
            pattern = os.path.join(dump, "module_*.jit_train_step.*after_spmd-partitioning*.hlo.pb")
            before = set(glob.glob(pattern))
            lowered.compile()
            files = sorted(set(glob.glob(pattern)) - before)
            if len(files) != 1:
                raise RuntimeError(f"{case}: expected one post-spmd-partitioning dump, found {files}")
            with open(files[0], "rb") as fh:
                proto = _hlo_module_proto(fh.read())
            with open(os.path.join(outdir, f"{case}.xla.mlirbc"), "wb") as fh:
                fh.write(_jax.mlir.hlo_to_stablehlo(proto))
            with open(files[0][: -len(".hlo.pb")] + ".txt") as fh:
                groups = channel_groups(fh.read())
            with open(os.path.join(outdir, f"{case}.xla.groups.json"), "w") as fh:
                json.dump({str(k): v for k, v in sorted(groups.items())}, fh)
    finally:
        shutil.rmtree(dump, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
