"""IREE compile flows (the `[iree]` extra: iree-base-compiler, iree-base-runtime).

- `compile_module(module, compile_to=...)`: one of our (jaxlib) modules compiled by
  IREE in this process; IREE's rejections come back as `IreeError` naming our op and
  its location (docs/iree.md).
- `IreeFormation(module)`: IREE's dispatch regions as our kernels
  (`--annotate-cost="fusion=iree"`, docs/kernels.md).

Importing this package does not import IREE; its functions do, and raise `IreeError`
(an InputError: one line) when it is not installed.
"""

from .compiler import (
    DEFAULT_FLAGS,
    MARKER,
    Compiled,
    IreeDiagnostic,
    IreeError,
    Prepared,
    available,
    compile_module,
    compile_prepared,
    prepare,
)
from .formation import PLACEMENTS, IreeFormation

__all__ = [
    "DEFAULT_FLAGS",
    "MARKER",
    "Compiled",
    "IreeDiagnostic",
    "IreeError",
    "IreeFormation",
    "PLACEMENTS",
    "Prepared",
    "available",
    "compile_module",
    "compile_prepared",
    "prepare",
]
