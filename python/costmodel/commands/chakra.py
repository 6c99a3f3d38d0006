"""`costmodel chakra dump FILE.et` / `costmodel chakra check DIR`."""

from __future__ import annotations

import json
import sys

from . import CommandError


def register(subparsers) -> None:
    p = subparsers.add_parser("chakra", help="inspect and validate Chakra execution traces")
    sub = p.add_subparsers(dest="chakra_command", metavar="ACTION")
    dump = sub.add_parser("dump", help="print one .et file as JSON")
    dump.add_argument("file", help="a <prefix>.<rank>.et file")
    dump.add_argument("--limit", type=int, default=None, metavar="N", help="print only the first N nodes")
    dump.set_defaults(func=_dump)
    check = sub.add_parser("check", help="validate a trace directory (exit 1 on violations)")
    check.add_argument("directory", help="trace directory (the pass's chakra-dir)")
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    check.set_defaults(func=_check)
    p.set_defaults(func=lambda args: (p.print_help(sys.stderr), 2)[1])


def _attr_json(a) -> dict:
    from ..chakra.io import attr_value

    which = a.WhichOneof("value")
    out = {"name": a.name}
    if a.doc_string:
        out["doc_string"] = a.doc_string
    if which is not None:
        v = attr_value(a)
        if isinstance(v, (bytes, bytearray)):
            v = v.hex()
        elif isinstance(v, list):
            v = [x.hex() if isinstance(x, (bytes, bytearray)) else x for x in v]
        out[which] = v
    return out


def node_json(n) -> dict:
    from ..chakra import et_def_pb2 as pb

    out = {
        "id": n.id,
        "name": n.name,
        "type": pb.NodeType.Name(n.type) if n.type in pb.NodeType.values() else n.type,
    }
    if n.ctrl_deps:
        out["ctrl_deps"] = list(n.ctrl_deps)
    if n.data_deps:
        out["data_deps"] = list(n.data_deps)
    if n.start_time_micros:
        out["start_time_micros"] = n.start_time_micros
    out["duration_micros"] = n.duration_micros
    for key in ("inputs", "outputs"):
        if n.HasField(key):
            io = getattr(n, key)
            out[key] = {"values": io.values, "shapes": io.shapes, "types": io.types}
    out["attr"] = [_attr_json(a) for a in n.attr]
    return out


def _dump(args) -> int:
    from ..chakra.io import TraceFormatError, read_trace

    if args.limit is not None and args.limit < 0:
        raise CommandError(f"--limit must be at least 0, got {args.limit}")
    try:
        meta, nodes = read_trace(args.file)
    except TraceFormatError as err:
        raise CommandError(str(err)) from None
    shown = nodes if args.limit is None else nodes[: max(0, args.limit)]
    doc = {
        "file": args.file,
        "metadata": {"version": meta.version, "attr": [_attr_json(a) for a in meta.attr]},
        "num_nodes": len(nodes),
        "nodes": [node_json(n) for n in shown],
    }
    sys.stdout.write(json.dumps(doc, indent=1) + "\n")
    return 0


def _check(args) -> int:
    from ..chakra.check import check_dir

    report = check_dir(args.directory)
    if args.json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2) + "\n")
        return 0 if report.ok else 1
    if report.ok:
        sys.stdout.write(
            f"ok: {args.directory}: {report.ranks} ranks, {report.nodes} nodes, "
            f"{report.collectives_per_rank} collectives per rank, {report.collectives} collective issues, "
            f"{report.messages} point-to-point messages\n"
        )
        return 0
    for v in report.violations:
        sys.stdout.write(f"{args.directory}: {v}\n")
    n = len(report.violations)
    sys.stderr.write(f"costmodel: chakra check: {n} violation{'s' if n != 1 else ''} in {args.directory}\n")
    return 1
