"""The evaluation workloads: data-parallel JAX ResNet steps as StableHLO (docs/workloads.md).

- `configs`: the ResNet configurations and their sizes (pure Python);
- `resnet`: the flax.linen model (imports jax and flax);
- `export`: the training / inference step, lowered with `jax.pmap(...).lower(...)`;
- `replicas`: jax's shard_map-based pmap lowering -> the classic replica form.

Only `configs` may be imported without the `[jax]` extra.
"""
