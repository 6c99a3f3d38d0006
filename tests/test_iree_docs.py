"""docs/iree.md's "In one Python process" block, run exactly as written: our pass on
jaxlib's MLIR, IREE's compiler and runtime on the result, in this process."""

from __future__ import annotations

import os
import re

import numpy as np

DOC = os.path.join(os.path.dirname(__file__), "..", "docs", "iree.md")


def documented_block() -> str:
    text = open(DOC, encoding="utf-8").read()
    m = re.search(r"<!-- tested: tests/test_iree_docs.py -->\n```python\n(.*?)```", text, re.S)
    assert m, "docs/iree.md lost its tested block"
    return m.group(1)


def test_documented_pipeline_runs(capsys):
    namespace: dict = {"__name__": "__doc_snippet__"}
    exec(compile(documented_block(), "docs/iree.md", "exec"), namespace)
    out = capsys.readouterr().out
    # the pass's figures came back from the annotated module ...
    assert namespace["kernels"] == 1  # IREE fuses the GEMM and its tanh: one dispatch
    assert namespace["predicted_ns"] > 0
    # ... IREE compiled the annotated module, and its runtime computed tanh(x @ w)
    x, w = namespace["x"], namespace["w"]
    np.testing.assert_allclose(namespace["result"], np.tanh(x @ w), rtol=1e-5)
    assert out.startswith("1 dispatch(es), predicted ")
