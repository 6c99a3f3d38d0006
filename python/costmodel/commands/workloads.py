"""`costmodel workloads list` / `costmodel workloads export MODEL ...`: the evaluation workloads.

`export` writes the StableHLO text of a data-parallel JAX ResNet training (or inference)
step the way the ISPASS 2026 paper's workloads were made (docs/workloads.md). It needs
the `[jax]` extra (jax + flax); `list` does not.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from . import CommandError

PROGRESS_AFTER_S = 1.0


def register(subparsers) -> None:
    from ..workloads.configs import IMAGE_SIZE, MODELS, NUM_CLASSES
    from ..workloads.export import LOSS_SCALES, LR_SCHEDULES, MODES

    p = subparsers.add_parser("workloads", help="list or export the evaluation workloads (JAX ResNet steps)")
    sub = p.add_subparsers(dest="workloads_command", metavar="ACTION")

    ls = sub.add_parser("list", help="print the ResNet configurations (blocks, widths, parameters, FLOPs)")
    ls.add_argument(
        "--image-size", type=int, default=IMAGE_SIZE, metavar="PIXELS", help="for the FLOPs column (default 224)"
    )
    ls.set_defaults(func=_list)

    ex = sub.add_parser(
        "export",
        help="write the StableHLO text of a data-parallel (pmap) ResNet step",
        description="Lower (never compile or run) a jax.pmap ResNet training or inference step from "
        "abstract arguments and write its StableHLO text. Needs: pip install 'stablehlo-costmodel[jax]'.",
    )
    ex.add_argument("model", metavar="MODEL", help=f"one of {', '.join(MODELS)}")
    ex.add_argument("--mode", default="train", help=f"{' or '.join(MODES)} (default train)")
    ex.add_argument("--devices", type=int, default=4, metavar="N", help="data-parallel replicas (default 4)")
    ex.add_argument(
        "--global-batch", type=int, default=1024, metavar="IMAGES", help="images per step over all devices (default 1024)"
    )
    ex.add_argument("--dtype", default="bf16", help="bf16 (mixed precision: f32 parameters) or f32 (default bf16)")
    ex.add_argument("--image-size", type=int, default=IMAGE_SIZE, metavar="PIXELS", help="height = width (default 224)")
    ex.add_argument("--num-classes", type=int, default=NUM_CLASSES, metavar="N", help="default 1000")
    ex.add_argument(
        "--loss-scale",
        default="auto",
        help=f"{', '.join(LOSS_SCALES)}: flax's DynamicScale "
        "(auto: on for a bf16 training step, as in the paper's file)",
    )
    ex.add_argument(
        "--lr-schedule", default="warmup-cosine", help=f"{' or '.join(LR_SCHEDULES)} (default warmup-cosine)"
    )
    ex.add_argument(
        "--weight-decay", type=float, default=1e-4, metavar="WD", help="L2 penalty in the loss (default 1e-4; 0: none)"
    )
    ex.add_argument(
        "--nesterov",
        action="store_true",
        help="Nesterov momentum (flax's imagenet example, and what the paper's resnet18 file computes)",
    )
    ex.add_argument(
        "--no-sync-batch-stats",
        dest="sync_batch_stats",
        action="store_false",
        help="do not pmean the new batch-norm running statistics at the end of the step",
    )
    ex.add_argument(
        "--form",
        default="replicas",
        help="replicas: mhlo.num_replicas = N as the classic pmap lowering (default); "
        "shard-map: jax's own lowering (num_partitions = N, sdy.manual_computation)",
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
    return 0


def _export(args) -> int:
    from ..ir import write_atomically
    from ..workloads.export import ExportError, ExportOptions, export_text

    opts = ExportOptions(
        model=args.model,
        mode=args.mode,
        devices=args.devices,
        global_batch=args.global_batch,
        dtype=args.dtype,
        image_size=args.image_size,
        num_classes=args.num_classes,
        loss_scale=args.loss_scale,
        lr_schedule=args.lr_schedule,
        weight_decay=args.weight_decay,
        nesterov=args.nesterov,
        sync_batch_stats=args.sync_batch_stats,
        form=args.form,
    )
    try:
        opts.validate()
    except ExportError as err:
        raise CommandError(str(err)) from None

    if args.output != "-":  # fail before the lowering, not after it
        from ..outputs import expand_path

        parent = os.path.dirname(os.path.abspath(expand_path(args.output)))
        if not os.path.isdir(parent):
            raise CommandError(f"cannot write '{args.output}': No such file or directory")

    what = (
        f"{opts.model} {opts.mode} step ({opts.devices} devices x {opts.per_device_batch} images "
        f"{opts.image_size}x{opts.image_size}, {opts.dtype})"
    )
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
