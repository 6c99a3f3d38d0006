"""Which branch of a `stablehlo.case` / `stablehlo.if` a prediction counts (docs/cost-rules.md,
"Conditionals").

A step runs one branch; which one depends on data we do not have. `annotate-cost`'s
option `branch` chooses, once for every consumer:

* `max` (default): the costliest branch, the one with the largest predicted time (ties:
  the lowest index); every count of the op (flops, bytes, kernels, collectives, memory)
  is that branch's.
* `mean`: each of the N branches with weight 1/N: the expected cost if every branch
  were equally likely (counts are the weighted means, rounded to whole counts in
  `costmodel.cost`; collective executions and kernel executions may be fractional).
* `<k>` (an integer): branch k, as `stablehlo.case` runs it: an index outside 0..N-1
  runs the last branch. For `stablehlo.if`, 0 is the true branch, 1 the false one.
* `xla`: XLA's cost analysis convention (HloCostAnalysis::HandleConditional): each count
  (flops, transcendentals, bytes, kernels) its own maximum over the branches, an upper
  bound no single branch may reach (what the XLA oracle tests compare); the time, the
  collectives, memory and the Chakra trace are those of the costliest branch, as `max`.

annotate-cost writes the weights it used on every case/if op,
`costmodel.branch_weights = array<f64: ...>`, and the policy in `costmodel.summary`
(`branch`); the kernel report, the memory analysis, extract-collectives and the Chakra
exporter read the weights, so every number comes from the same branch. (The memory
analysis of a module annotate-cost has not seen uses its own `branch` argument, with
`max` meaning the branch of the largest memory peak.)
"""

from __future__ import annotations

from .ir import InputError, ir

__all__ = ["BRANCH_ATTR", "CASE_OPS", "parse_policy", "weights_for", "op_weights", "set_op_weights"]

BRANCH_ATTR = "costmodel.branch_weights"
CASE_OPS = frozenset({"stablehlo.case", "stablehlo.if"})
POLICIES = ("max", "mean", "xla", "<index>")


def parse_policy(text) -> str | int:
    """'max' | 'mean' | 'xla' | a branch index (int >= 0); InputError (one line) otherwise."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        s = str(text).strip()
        if s in ("max", "mean", "xla"):
            return s
        try:
            value = int(s)
        except ValueError:
            raise InputError(f"branch must be max, mean, xla or a branch index (an integer >= 0), got '{text}'") from None
    if value < 0:
        raise InputError(f"branch index must be >= 0, got {value}")
    return value


def weights_for(policy: str | int, branch_times_ns: list[float]) -> list[float]:
    """The weight of each branch under `policy`, given each branch's predicted time."""
    n = len(branch_times_ns)
    if n == 0:
        return []
    if policy == "mean":
        return [1.0 / n] * n
    if policy in ("max", "xla"):
        k = max(range(n), key=lambda i: (branch_times_ns[i], -i))
    else:
        k = policy if policy < n else n - 1  # case: an out-of-range index runs the last branch
    return [1.0 if i == k else 0.0 for i in range(n)]


def op_weights(op) -> list[float] | None:
    """The weights annotate-cost wrote on a case/if op, or None."""
    if BRANCH_ATTR not in op.attributes:
        return None
    return [float(x) for x in ir.DenseF64ArrayAttr(op.attributes[BRANCH_ATTR])]


def set_op_weights(op, weights: list[float]) -> None:
    op.attributes[BRANCH_ATTR] = ir.DenseF64ArrayAttr.get([float(w) for w in weights])


def chosen(weights: list[float]) -> int | None:
    """The one branch a one-hot weight vector selects, or None (mean)."""
    ones = [i for i, w in enumerate(weights) if w == 1.0]
    return ones[0] if len(ones) == 1 and sum(weights) == 1.0 else None
