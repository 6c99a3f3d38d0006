"""Chakra execution traces (the input format of ASTRA-sim).

- `et_def.proto` / `et_def_pb2`: our copy of the schema with Chakra's field numbers.
- `io`: the length-delimited writer and reader (GlobalMetadata first).
- `export`: per-rank graphs from an annotated module, and the trace directory.
- `check`: the invariants a trace directory must satisfy.

`costmodel.simulate` runs a trace directory; `costmodel.astrasim` runs ASTRA-sim on it.
"""

from . import et_def_pb2  # noqa: F401
from .io import TraceFormatError, read_trace, write_trace  # noqa: F401
