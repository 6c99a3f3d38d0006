"""`costmodel learn collect|train|eval`: the learned backend's data and model
(costmodel.learn, docs/learned-model.md)."""

from __future__ import annotations

import json
import math
import os
import sys

from ..jsonio import json_loads
from . import CommandError


def register(subparsers) -> None:
    p = subparsers.add_parser("learn", help="collect kernel measurements, train and evaluate the learned cost model")
    sub = p.add_subparsers(dest="learn_command", metavar="ACTION")

    c = sub.add_parser("collect", help="profile a generated corpus (and the held-in workloads) into a dataset (JSON lines)")
    c.add_argument("--out", "-o", required=True, help="dataset file (appended to; programs already there are skipped)")
    c.add_argument("--programs", type=int, default=200, help="generated programs (default 200)")
    c.add_argument("--seed", type=int, default=0, help="seed of the generated corpus")
    c.add_argument("--families", default="", help="comma-separated program families (default: all)")
    c.add_argument("--held-in", action="store_true", help="also the held-in workloads (MLP, ResNet block, transformer block, GEMMs)")
    c.add_argument("--exclude", action="append", default=[], help="a dataset whose programs must not be generated again (held-out sets)")
    c.add_argument("--fusion", default="none,xla-gpu,xla-tpu", help="kernel formations whose kernels are measured")
    c.add_argument("--threads", type=int, default=1, help="the profiled backend's IREE worker threads (default 1; 0: one per physical core)")
    c.add_argument("--repeats", type=int, default=5, help="timed repetitions per kernel, the median kept (default 5)")
    c.add_argument("--min-time-ms", type=float, default=20.0, help="each repetition runs the kernel for at least this long (default 20)")
    c.add_argument("--no-program-times", action="store_true", help="skip measuring whole programs")
    c.set_defaults(func=_collect)

    t = sub.add_parser("train", help="train gradient-boosted trees on datasets; report held-out metrics (split by program)")
    t.add_argument("data", nargs="+", help="dataset files")
    t.add_argument("--out", "-o", required=True, help="model file (JSON)")
    t.add_argument("--test-fraction", type=float, default=0.2, help="programs held out for the report (0: none)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--fusion", default="xla-tpu", help="kernel formation of the program-level figures")
    t.add_argument("--no-refit", action="store_true", help="ship the model of the training split (default: refit on all)")
    t.add_argument("--param", action="append", default=[], help="a GradientBoostingRegressor parameter, KEY=VALUE")
    t.add_argument("--baseline", choices=("roofline", "none"), default="roofline", help="what the trees' factor multiplies (default roofline)")
    t.add_argument("--baseline-floor-ns", type=float, default=1000.0, help="added to the roofline baseline (default 1000)")
    t.set_defaults(func=_train)

    e = sub.add_parser("eval", help="metrics of a model on datasets (kernels and whole programs)")
    e.add_argument("data", nargs="+")
    e.add_argument("--model", default="default", help="model file (default: the shipped one of --hardware)")
    e.add_argument("--hardware", default=None,
                   help="whose shipped model --model=default is (host-cpu, h200; default: the hardware the dataset was measured on)")
    e.add_argument("--fusion", default="xla-tpu")
    e.add_argument("--json", action="store_true")
    e.set_defaults(func=_eval)
    p.set_defaults(func=lambda args: (p.print_help(sys.stderr), 2)[1])


def _log(msg: str) -> None:
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


def _fusions(text: str) -> tuple[str, ...]:
    from ..kernels import FUSION_POLICIES

    out = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [x for x in out if x not in FUSION_POLICIES]
    if bad or not out:
        raise CommandError(f"--fusion expects a comma-separated list of {', '.join(FUSION_POLICIES)}, got '{text}'")
    return out


def _collect(args) -> int:
    from ..learn.dataset import collect, read_dataset
    from ..learn.programs import FAMILIES, corpus_programs, held_in_programs

    fusions = _fusions(args.fusion)
    fams = [f.strip() for f in args.families.split(",") if f.strip()] or None
    if fams:
        bad = [f for f in fams if f not in FAMILIES]
        if bad:
            raise CommandError(f"unknown program family '{bad[0]}' (known: {', '.join(FAMILIES)})")
    if args.programs < 0 or args.threads < 0 or args.repeats < 1 or not args.min_time_ms > 0:
        raise CommandError("--programs and --threads must be >= 0, --repeats >= 1, --min-time-ms > 0")
    _check_collect_out(args.out)
    excluded = set()
    for path in args.exclude:
        excluded |= {n.split("#")[0] for n in read_dataset(path).program_names()}
    progs = [p for p in corpus_programs(args.programs + len(excluded), args.seed, fams) if p.name.split("#")[0] not in excluded]
    progs = progs[: args.programs]
    if args.held_in:
        progs = held_in_programs() + progs
    stats = collect(
        progs,
        args.out,
        fusions=fusions,
        threads=args.threads,
        repeats=args.repeats,
        min_time_ms=args.min_time_ms,
        measure_programs=not args.no_program_times,
        log=_log,
    )
    sys.stdout.write(json.dumps(stats) + "\n")
    return 0


def _check_collect_out(path: str) -> None:
    """`learn collect` appends to --out and reads it back: a regular file that is a
    dataset (its first row a meta row), or a new file in an existing directory; anything
    else (a model, a spec, /dev/stdout, a missing directory) is refused before hours of
    measuring."""
    import stat

    real = os.path.realpath(path)
    if not os.path.exists(real):
        parent = os.path.dirname(real) or "."
        if not os.path.isdir(parent):
            raise CommandError(f"--out {path}: directory '{os.path.dirname(path) or '.'}' does not exist")
        return
    if not stat.S_ISREG(os.stat(real).st_mode):
        raise CommandError(f"--out {path}: not a regular file (collect appends to its dataset and reads it back)")
    try:
        with open(real, encoding="utf-8") as fh:
            first = next((line for line in fh if line.strip()), "")
    except (OSError, UnicodeDecodeError) as err:
        raise CommandError(f"--out {path}: cannot read it back: {err}") from None
    if not first:
        return
    try:
        row = json_loads(first)
    except ValueError:  # not JSON, or nested too deep
        row = None
    if not isinstance(row, dict) or row.get("type") != "meta":
        raise CommandError(f"--out {path}: exists and is not a dataset (its first line is no meta row); "
                           "collect into a new file or an earlier collection's")


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def _params(items) -> dict:
    out = {}
    for item in items:
        if "=" not in item:
            raise CommandError(f"--param expects KEY=VALUE, got '{item}'")
        k, v = item.split("=", 1)
        try:
            out[k] = json_loads(v)
        except ValueError:
            out[k] = v
    return out


def _train(args) -> int:
    from ..learn.dataset import read_dataset
    from ..learn.train import fmt_metrics, train_model

    if not 0 <= args.test_fraction < 1:
        raise CommandError(f"--test-fraction must be in [0, 1), got {args.test_fraction}")
    (fusion,) = _fusions(args.fusion)[:1]
    if not (math.isfinite(args.baseline_floor_ns) and args.baseline_floor_ns >= 0):
        raise CommandError(f"--baseline-floor-ns must be a finite number >= 0, got {args.baseline_floor_ns}")
    for data in args.data:
        if _same_file(data, args.out):
            raise CommandError(f"--out {args.out} is the dataset {data}: the model would replace it; write the model elsewhere")
    ds = _measured(read_dataset(args.data), args.data)
    train_programs = len(ds.program_names()) - round(len(ds.program_names()) * args.test_fraction)
    if args.test_fraction > 0 and train_programs < 1:
        raise CommandError(f"--test-fraction {args.test_fraction} leaves none of the {len(ds.program_names())} programs to train on")
    try:
        model, report = train_model(
            ds,
            test_fraction=args.test_fraction,
            seed=args.seed,
            fusion=fusion,
            params=_params(args.param),
            refit=not args.no_refit,
            log=_log,
            baseline=args.baseline,
            baseline_floor_ns=args.baseline_floor_ns,
        )
    except TypeError as err:  # a bad --param name
        raise CommandError(f"bad --param: {err}") from None
    model.save(args.out)
    if "split" in report:
        s = report["split"]
        sys.stdout.write(
            f"split by program: {s['train_programs']} train / {s['test_programs']} test programs, "
            f"{s['train_kernels']} train kernels, {s['test_kernels_unseen']} unseen test kernels\n"
            f"held-out kernels:  {fmt_metrics(report['held_out_kernel'])}\n"
            f"held-out programs: {fmt_metrics(report['held_out_program'])} (fusion={fusion})\n"
        )
    sys.stdout.write(f"model: {len(model.trees)} trees, trained on {model.meta['rows']} kernels -> {args.out}\n")
    return 0


def _no_nan(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _no_nan(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_no_nan(v) for v in x]
    return x


def _measured(ds, paths):
    """The dataset, when it holds measured kernels (not a plan awaiting its times)."""
    if not ds.kernels:
        raise CommandError(f"no measured kernel in {', '.join(paths)}")
    missing = ds.unmeasured_kernels()
    if missing:
        raise CommandError(f"{', '.join(paths)}: {missing} of {len(ds.kernels)} kernel rows have no measured time "
                           "(target_ns): a plan, not a dataset (`costmodel learn` docs: import the GPU's times first)")
    return ds


def _eval(args) -> int:
    from ..backends import BackendError
    from ..backends.learned import shipped_model_path
    from ..learn.dataset import read_dataset
    from ..learn.model import TreeModel
    from ..learn.train import evaluate_model, fmt_metrics

    (fusion,) = _fusions(args.fusion)[:1]
    ds = _measured(read_dataset(args.data), args.data)
    measured_on = str(ds.meta.get("hardware") or "host-cpu")
    try:
        path = shipped_model_path(args.hardware or measured_on) if args.model == "default" else args.model
    except BackendError as err:
        raise CommandError(str(err)) from None
    try:
        model = TreeModel.load(path)
    except ValueError as err:
        raise CommandError(str(err)) from None
    learned_on = str(model.meta.get("hardware") or "host-cpu")
    if learned_on != measured_on:
        raise CommandError(f"the model '{path}' learned '{learned_on}' but {', '.join(args.data)} was measured on "
                           f"'{measured_on}' (its meta): evaluate a model of '{measured_on}'")
    report = evaluate_model(model, ds, fusion)
    if args.json:  # strict JSON: a metric that has no value (NaN) is null
        sys.stdout.write(json.dumps(_no_nan(report), indent=1, allow_nan=False) + "\n")
    else:
        sys.stdout.write(f"kernels:  {fmt_metrics(report['kernel'])}\nprograms: {fmt_metrics(report['program'])} (fusion={fusion})\n")
    return 0
