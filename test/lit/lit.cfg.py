# -*- Python -*-
"""lit configuration for the stablehlo-costmodel lit suite.

Two ways to run it:

  * from a CMake build (MLIR-project style): `cmake --build build --target check-lit`
    runs `lit build/test/lit`, whose `lit.site.cfg.py` (configured from
    `lit.site.cfg.py.in`) records the tools CMake found and then loads this file;
  * straight from the source tree: `lit test/lit` uses the `stablehlo-opt` and
    `filecheck`/`FileCheck` found on PATH (e.g. in the active virtualenv).

Tests write `stablehlo-opt`, `FileCheck` (or `filecheck`) and lit's builtin `not`.
Substitutions: `%shared` is the project's `../shared` directory (real workloads;
tests that use it say `REQUIRES: shared`), `%data` is `tests/data`, and `%python` the
Python interpreter that runs the tools.
"""

import os
import shutil
import sys

import lit.formats
import lit.util

config.name = "stablehlo-costmodel"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir"]
config.excludes = ["Inputs", "Output", "lit.cfg.py", "lit.site.cfg.py", "CMakeLists.txt"]

config.test_source_root = os.path.dirname(os.path.abspath(__file__))
src_root = getattr(config, "costmodel_src_root", None) or os.path.dirname(
    os.path.dirname(config.test_source_root)
)
obj_root = getattr(config, "costmodel_obj_root", None)
if obj_root:
    config.test_exec_root = os.path.join(obj_root, "test", "lit")
else:
    config.test_exec_root = config.test_source_root  # Output/ dirs are git-ignored


def _configured(name):
    """A tool path recorded by CMake in lit.site.cfg.py, if it is usable."""
    value = getattr(config, name, None)
    if value and not value.endswith("-NOTFOUND") and os.path.exists(value):
        return value
    return None


def _find_tool(names, configured=None):
    if configured:
        return configured
    search = os.pathsep.join(
        p for p in (os.path.dirname(sys.executable), os.environ.get("PATH", "")) if p
    )
    for name in names:
        found = shutil.which(name, path=search)
        if found:
            return found
    return None


stablehlo_opt = _find_tool(["stablehlo-opt"], _configured("stablehlo_opt"))
filecheck = _find_tool(["FileCheck", "filecheck"], _configured("filecheck"))
if stablehlo_opt is None:
    lit_config.fatal(
        "stablehlo-opt not found: install the package (pip install -e '.[test]') or configure with CMake"
    )
if filecheck is None:
    lit_config.fatal("FileCheck/filecheck not found: pip install filecheck")

# The tools' directories go first on PATH, so RUN lines name them plainly.
path_dirs = []
for tool in (stablehlo_opt, filecheck):
    d = os.path.dirname(tool)
    if d not in path_dirs:
        path_dirs.append(d)
config.environment["PATH"] = os.pathsep.join(path_dirs + [os.environ.get("PATH", "")])
for var in ("HOME", "VIRTUAL_ENV", "PYTHONPATH", "TMPDIR", "LANG", "LC_ALL"):
    if var in os.environ:
        config.environment[var] = os.environ[var]

# `FileCheck` and `filecheck` both work in RUN lines, whichever one is installed.
fc_name = os.path.basename(filecheck)
if fc_name != "FileCheck":
    config.substitutions.append((r"\bFileCheck\b", filecheck))
elif shutil.which("filecheck") is None:
    config.substitutions.append((r"(?<![-/\w])filecheck\b", filecheck))

python = getattr(config, "python_executable", None) or sys.executable
config.substitutions.append(("%python", python))
config.substitutions.append(("%data", os.path.join(src_root, "tests", "data")))

shared = getattr(config, "shared_dir", None) or os.path.join(os.path.dirname(src_root), "shared")
if os.path.isdir(os.path.join(shared, "workloads")):
    config.available_features.add("shared")
config.substitutions.append(("%shared", shared))
