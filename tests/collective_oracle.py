"""Shared by the partitioner oracles (tests/test_spmd_oracle.py,
tests/test_workloads_llama.py): which ops are collectives, and the device groups of a
`#stablehlo.replica_group_mesh_axes` attribute, read back from its `sdy.mesh`."""

from __future__ import annotations

import math
import re

import numpy as np

from costmodel.collectives import GROUP_COLLECTIVE_OPS
from costmodel.ir import ir

KINDS = GROUP_COLLECTIVE_OPS


def _mesh(module, name):
    for op in module.regions[0].blocks[0].operations:
        op = op.operation
        if op.name == "sdy.mesh" and ir.StringAttr(op.attributes["sym_name"]).value == name:
            text = str(op.attributes["mesh"])
            axes = [(a, int(s)) for a, s in re.findall(r'"([^"]+)"\s*=\s*(\d+)', text)]
            ids = re.search(r"device_ids\s*=\s*\[([^\]]*)\]", text)
            n = math.prod(s for _, s in axes)
            dev = [int(x) for x in ids.group(1).split(",")] if ids else list(range(n))
            return axes, dev
    raise AssertionError(f"no sdy.mesh @{name}")


def groups_from_mesh_axes(module, text):
    """`#stablehlo.replica_group_mesh_axes<mesh = @m, axes = [...]>` -> device groups."""
    mesh = re.search(r"mesh\s*=\s*@([\w.$-]+)", text).group(1)
    axes, dev = _mesh(module, mesh)
    refs = re.findall(r'#stablehlo\.axis_ref<name = "([^"]+)"([^>]*)>', text)
    assert all("sub_axis" not in rest for _, rest in refs), f"sub-axes not handled in this test: {text}"
    names = [n for n, _ in refs]
    arr = np.array(dev).reshape([s for _, s in axes])
    group_dims = [i for i, (a, _) in enumerate(axes) if a in names]
    other = [i for i in range(len(axes)) if i not in group_dims]
    # order group dims as listed in the attribute (major to minor)
    group_dims = sorted(group_dims, key=lambda i: names.index(axes[i][0]))
    arr = arr.transpose(other + group_dims).reshape(-1, math.prod(axes[i][1] for i in group_dims) if group_dims else 1)
    return [list(map(int, g)) for g in arr]


def run_generator(script: str, out, args: list, timeout: int) -> None:
    """Run a workload generator (tests/data/sharded/*.py) in a child Python on the host
    CPU (its own XLA flags: the child picks its device count), failing the test with
    the end of its stderr if it fails."""
    import os
    import subprocess
    import sys

    import pytest

    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    env["JAX_PLATFORMS"] = "cpu"
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    proc = subprocess.run(
        [sys.executable, script, str(out), *args], env=env, capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode != 0:
        pytest.fail(f"{os.path.basename(script)} failed:\n{proc.stderr[-4000:]}")
