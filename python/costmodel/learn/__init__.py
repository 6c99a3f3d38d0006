"""The learned cost model (issue 11; docs/learned-model.md): features of a kernel's
MLIR, gradient-boosted trees trained on kernels the profiled backend measured.

- `features`: kernel -> feature dict (`FEATURE_NAMES`), token sequence
- `model`: `TreeModel` (scikit-learn training, JSON trees, pure-Python prediction)
- `dataset`: the JSON-lines dataset, `collect()` (`costmodel learn collect`)
- `train`: `train_model` / `evaluate_model` (split by program; `costmodel learn train|eval`)
- `programs`: JAX-made programs: the held-in workloads and the random corpus
- `gpu`: a GPU's data: plan kernel programs here, measure them on the GPU, import them
The backend itself is `costmodel.backends.learned`.
"""
