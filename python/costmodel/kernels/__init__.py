"""Kernel formation: which ops a real compiler launches together as one kernel.

`form_kernels(nodes, policy)` groups the ops of one block (a function body, a loop
body, a branch) into `Kernel`s following XLA's GPU or TPU fusion pipeline
(docs/kernels.md); every backend sees the result through
`Backend.estimate_kernel(kernel)`. A kernel's flops are the sum of its ops' flops; its
bytes are its external inputs and outputs only, so intermediates of a fused chain never
touch HBM.
"""

from .formation import (
    FUSION_POLICIES,
    Kernel,
    Node,
    default_policy_for,
    form_kernels,
    op_class,
)

__all__ = ["FUSION_POLICIES", "Kernel", "Node", "default_policy_for", "form_kernels", "op_class"]
