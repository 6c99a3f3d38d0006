"""`costmodel workloads list` / `costmodel workloads export MODEL ...`: the evaluation workloads.

`export` writes the StableHLO text of a data-parallel JAX ResNet training (or inference)
step the way the ISPASS 2026 paper's workloads were made, or of a sharded LLaMA-3
training step (`llama3-*`: FSDP / tensor / data parallel on a `--mesh`)
(docs/workloads.md). It needs the `[jax]` extra (jax + flax + optax); `list` does not.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from . import CommandError

PROGRESS_AFTER_S = 1.0


# ResNet-only options (default None, so that a LLaMA export can tell they were given)
_RESNET_ONLY = {
    "mode": "train",
    "devices": 4,
    "image_size": None,  # IMAGE_SIZE, filled in at parse time
    "num_classes": None,  # NUM_CLASSES
    "loss_scale": "auto",
    "lr_schedule": "warmup-cosine",
    "weight_decay": 1e-4,
    "form": "replicas",
}
_LLAMA_ONLY = {"mesh": None, "seq_len": 2048, "param_dtype": "f32", "sharding": "shardy", "layers": None}


def register(subparsers) -> None:
    from ..workloads.configs import IMAGE_SIZE, LLAMA_MODELS, MODELS, NUM_CLASSES
    from ..workloads.export import LOSS_SCALES, LR_SCHEDULES, MODES, PARAM_DTYPES, SHARDINGS

    _RESNET_ONLY["image_size"] = IMAGE_SIZE
    _RESNET_ONLY["num_classes"] = NUM_CLASSES

    p = subparsers.add_parser(
        "workloads", help="list or export the evaluation workloads (JAX ResNet and LLaMA-3 training steps)"
    )
    sub = p.add_subparsers(dest="workloads_command", metavar="ACTION")

    ls = sub.add_parser(
        "list", help="print the ResNet and LLaMA-3 configurations (layers, widths, parameters, FLOPs)"
    )
    ls.add_argument(
        "--image-size", type=int, default=IMAGE_SIZE, metavar="PIXELS", help="for the FLOPs column (default 224)"
    )
    ls.set_defaults(func=_list)

    ex = sub.add_parser(
        "export",
        help="write the StableHLO text of a ResNet (pmap) or a sharded LLaMA-3 training step",
        description="Lower (never compile or run) a training step from abstract arguments and write its "
        "StableHLO text: a jax.pmap ResNet training or inference step, or a LLaMA-3 training step sharded "
        "over a dp x fsdp x tp mesh (Shardy shardings; --sharding gspmd for mhlo.sharding strings). "
        "Needs: pip install 'stablehlo-costmodel[jax]'.",
    )
    ex.add_argument("model", metavar="MODEL", help=f"one of {', '.join([*MODELS, *LLAMA_MODELS])}")
    ex.add_argument(
        "--global-batch",
        type=int,
        default=None,
        metavar="N",
        help="images (ResNet, default 1024) or sequences (LLaMA, default one per data-parallel device) per step "
        "over all devices",
    )
    ex.add_argument(
        "--dtype", default="bf16", help="bf16 (mixed precision: f32 parameters) or f32 (default bf16)"
    )
    ll = ex.add_argument_group("LLaMA-3 steps (llama3-*)")
    ll.add_argument(
        "--mesh",
        default=None,
        metavar="dp=N,fsdp=N,tp=N",
        help="device mesh: data parallel, fully sharded data parallel (ZeRO-3), Megatron tensor parallel; "
        "axes left out are 1 (default fsdp=4)",
    )
    ll.add_argument("--seq-len", type=int, default=None, metavar="TOKENS", help="sequence length (default 2048)")
    ll.add_argument(
        "--param-dtype",
        default=None,
        help=f"{' or '.join(PARAM_DTYPES)}: parameters, gradients and AdamW state (default f32; bf16 as the "
        "paper's MaxText export)",
    )
    ll.add_argument(
        "--sharding", default=None, help=f"{' or '.join(SHARDINGS)}: the shardings' format in the export (default shardy)"
    )
    ll.add_argument("--scan", action="store_true", default=None, help="the layers as one lax.scan (default: a Python loop)")
    ll.add_argument(
        "--layers", type=int, default=None, metavar="N", help="override the configuration's number of layers"
    )
    rn = ex.add_argument_group("ResNet steps (resnet*)")
    rn.add_argument("--mode", default=None, help=f"{' or '.join(MODES)} (default train)")
    rn.add_argument("--devices", type=int, default=None, metavar="N", help="data-parallel replicas (default 4)")
    rn.add_argument("--image-size", type=int, default=None, metavar="PIXELS", help="height = width (default 224)")
    rn.add_argument("--num-classes", type=int, default=None, metavar="N", help="default 1000")
    rn.add_argument(
        "--loss-scale",
        default=None,
        help=f"{', '.join(LOSS_SCALES)}: flax's DynamicScale "
        "(auto: on for a bf16 training step, as in the paper's file)",
    )
    rn.add_argument(
        "--lr-schedule", default=None, help=f"{' or '.join(LR_SCHEDULES)} (default warmup-cosine)"
    )
    rn.add_argument(
        "--weight-decay", type=float, default=None, metavar="WD", help="L2 penalty in the loss (default 1e-4; 0: none)"
    )
    rn.add_argument(
        "--nesterov",
        action="store_true",
        default=None,
        help="Nesterov momentum (flax's imagenet example, and what the paper's resnet18 file computes)",
    )
    rn.add_argument(
        "--no-sync-batch-stats",
        dest="sync_batch_stats",
        action="store_false",
        default=None,
        help="do not pmean the new batch-norm running statistics at the end of the step",
    )
    rn.add_argument(
        "--form",
        default=None,
        help="replicas: mhlo.num_replicas = N as the classic pmap lowering (default); "
        "shard-map: jax's own lowering (num_partitions = N, sdy.manual_computation)",
    )
    ex.add_argument(
        "--debug-info",
        action="store_true",
        help="keep JAX's op names and source locations in the text (`costmodel kernels --by scope` sums the "
        "time by them); a larger file",
    )
    ex.add_argument(
        "-o", "--output", default="-", metavar="FILE", help="output file ('-': standard output, the default)"
    )
    ex.set_defaults(func=_export)
    p.set_defaults(func=lambda args: (p.print_help(sys.stderr), 2)[1])


def _list(args) -> int:
    from ..workloads import configs as c

    if args.image_size < 32:
        raise CommandError(f"image size {args.image_size} is too small (the network downsamples by 32; use >= 32)")
    w = sys.stdout.write
    w(
        f"{'model':<10} {'block':<10} {'blocks/stage':<13} {'widths':<15} {'block outputs':<18} {'params':>11} "
        f"{'GFLOP/img':>9} {'fwd convs':>9} {'train convs':>11} {'train all_reduces':>17}\n"
    )
    for name, cfg in c.MODELS.items():
        outputs = "-".join(str(x * cfg.expansion) for x in c.STAGE_WIDTHS)
        w(
            f"{name:<10} {cfg.block:<10} {'-'.join(map(str, cfg.stage_sizes)):<13} "
            f"{'-'.join(map(str, c.STAGE_WIDTHS)):<15} {outputs:<18} {c.param_count(cfg):>11,} "
            f"{c.forward_flops_per_image(cfg, args.image_size) / 1e9:>9.3f} {c.num_forward_convs(cfg):>9} "
            f"{c.num_train_convs(cfg):>11} {c.train_all_reduces(cfg):>17}\n"
        )
    w(
        f"GFLOP/img: forward convolutions + dense of one {args.image_size}x{args.image_size} image, "
        "2 per multiply-add; "
        "train counts: the default training step (docs/workloads.md)\n"
    )
    w("\n")
    w(
        f"{'model':<12} {'layers':>6} {'hidden':>6} {'heads':>5} {'kv':>3} {'head_dim':>8} {'ffn':>6} {'vocab':>7} "
        f"{'tied':>4} {'params':>14} {'nominal':>14} {'GFLOP/token':>11}  source\n"
    )
    for name, cfg in c.LLAMA_MODELS.items():
        w(
            f"{name:<12} {cfg.layers:>6} {cfg.hidden:>6} {cfg.heads:>5} {cfg.kv_heads:>3} {cfg.head_dim:>8} "
            f"{cfg.ffn:>6} {cfg.vocab:>7} {'yes' if cfg.tied_embeddings else 'no':>4} "
            f"{c.llama_param_count(cfg):>14,} {c.llama_nominal_params(cfg):>14,} "
            f"{c.llama_matmul_flops_per_token(cfg, 2048) / 1e9:>11.2f}  {cfg.source}\n"
        )
    w(
        "GFLOP/token: forward matmuls of one token at sequence length 2048 (2 per multiply-add); "
        "nominal: parameters without an untied output projection (docs/workloads.md)\n"
    )
    return 0


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _given(args, names) -> list[str]:
    return [_flag(n) for n in names if getattr(args, n, None) is not None]


def _resnet_options(args):
    from ..workloads.export import ExportOptions

    wrong = _given(args, [*_LLAMA_ONLY, "scan"])
    if wrong:
        raise CommandError(f"{', '.join(wrong)}: LLaMA-3 options, not for {args.model}")

    def get(name, default):
        value = getattr(args, name)
        return default if value is None else value

    return ExportOptions(
        model=args.model,
        global_batch=get("global_batch", 1024),
        dtype=args.dtype,
        nesterov=get("nesterov", False),
        sync_batch_stats=get("sync_batch_stats", True),
        debug_info=args.debug_info,
        **{k: get(k, v) for k, v in _RESNET_ONLY.items()},
    )


def _llama_options(args):
    from ..workloads.export import LlamaExportOptions, parse_mesh

    wrong = _given(args, [*_RESNET_ONLY, "nesterov", "sync_batch_stats"])
    if wrong:
        flags = ["--no-sync-batch-stats" if f == "--sync-batch-stats" else f for f in wrong]
        raise CommandError(f"{', '.join(flags)}: ResNet options, not for {args.model}")
    mesh = parse_mesh(args.mesh) if args.mesh is not None else {"dp": 1, "fsdp": 4, "tp": 1}
    return LlamaExportOptions(
        model=args.model,
        mesh=mesh,
        seq_len=2048 if args.seq_len is None else args.seq_len,
        global_batch=args.global_batch,
        dtype=args.dtype,
        param_dtype=args.param_dtype or "f32",
        sharding=args.sharding or "shardy",
        scan=bool(args.scan),
        layers=args.layers,
        debug_info=args.debug_info,
    )


def _describe(opts) -> str:
    from ..workloads.export import LlamaExportOptions

    if isinstance(opts, LlamaExportOptions):
        scan = ", layers scanned" if opts.scan else ""
        return (
            f"{opts.model} training step (mesh {opts.mesh_text()}, {opts.batch} x {opts.seq_len} tokens, "
            f"{opts.dtype}, {opts.sharding}{scan})"
        )
    return (
        f"{opts.model} {opts.mode} step ({opts.devices} devices x {opts.per_device_batch} images "
        f"{opts.image_size}x{opts.image_size}, {opts.dtype})"
    )


def _export(args) -> int:
    from ..ir import write_atomically
    from ..workloads.configs import LLAMA_MODELS
    from ..workloads.export import ExportError, export_text

    try:
        opts = _llama_options(args) if args.model in LLAMA_MODELS else _resnet_options(args)
        opts.validate()
    except ExportError as err:
        raise CommandError(str(err)) from None

    if args.output != "-":  # fail before the lowering, not after it
        from ..outputs import expand_path

        parent = os.path.dirname(os.path.abspath(expand_path(args.output)))
        if not os.path.isdir(parent):
            raise CommandError(f"cannot write '{args.output}': No such file or directory")

    what = _describe(opts)
    start = time.perf_counter()
    note = threading.Timer(PROGRESS_AFTER_S, lambda: sys.stderr.write(f"costmodel: lowering the {what} ...\n"))
    note.daemon = True
    note.start()
    try:
        text = export_text(opts, cpu_only=True)
    except ExportError as err:
        raise CommandError(str(err)) from None
    finally:
        note.cancel()
    write_atomically(args.output, text.encode("utf-8"))
    elapsed_s = time.perf_counter() - start
    if elapsed_s > PROGRESS_AFTER_S:
        where = "standard output" if args.output == "-" else args.output
        sys.stderr.write(f"costmodel: wrote the {what} to {where} in {elapsed_s:.1f} s\n")
    return 0
