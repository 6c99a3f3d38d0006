"""The evaluation workloads: data-parallel JAX ResNet steps and sharded LLaMA-3 training
steps as StableHLO (docs/workloads.md).

- `configs`: the ResNet and LLaMA-3 configurations and their sizes (pure Python);
- `resnet`: the flax.linen model (imports jax and flax);
- `llama`: the LLaMA-3 decoder, its AdamW training step and dp/fsdp/tp shardings
  (imports jax and optax);
- `export`: the steps, lowered from abstract arguments (`jax.pmap(...).lower(...)` for
  ResNet, `jax.jit(...).lower(...)` on a device mesh for LLaMA);
- `replicas`: jax's shard_map-based pmap lowering -> the classic replica form.

Only `configs` may be imported without the `[jax]` extra.
"""
