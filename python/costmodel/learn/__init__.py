"""The learned cost model (issue 11): features of a kernel's MLIR, a gradient-boosted
tree model trained on kernels measured by the profiled backend, and its corpus.

- `programs`: JAX-made programs (held-in workloads, the random corpus)
"""
