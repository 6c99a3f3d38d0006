"""ResNet in flax.linen, as flax's examples/imagenet `models.py` defines it.

Imports jax and flax: only the exporter (`export.py`) imports this module, after it has
chosen the devices. The architecture is described in `configs.py`, which this module
follows (the tests check the parameter count against `configs.param_count`).

Mixed precision exactly as the flax example with `dtype=jnp.bfloat16`: parameters and
batch-norm statistics are f32 (`param_dtype` default), the convolutions, the dense layer
and the activations compute in `dtype`; batch norm reduces in f32
(`force_float32_reductions`) and returns `dtype`.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import flax.linen as nn
import jax.numpy as jnp

from .configs import NUM_CLASSES, STAGE_WIDTHS, STEM_WIDTH, ResNetConfig

ModuleDef = Any


class ResNetBlock(nn.Module):
    """Basic block: two 3x3 convolutions."""

    filters: int
    conv: ModuleDef
    norm: ModuleDef
    act: Callable
    strides: tuple[int, int] = (1, 1)

    @nn.compact
    def __call__(self, x):
        residual = x
        y = self.conv(self.filters, (3, 3), self.strides)(x)
        y = self.norm()(y)
        y = self.act(y)
        y = self.conv(self.filters, (3, 3))(y)
        y = self.norm(scale_init=nn.initializers.zeros_init())(y)
        if residual.shape != y.shape:
            residual = self.conv(self.filters, (1, 1), self.strides, name="conv_proj")(residual)
            residual = self.norm(name="norm_proj")(residual)
        return self.act(residual + y)


class BottleneckResNetBlock(nn.Module):
    """Bottleneck block: 1x1, 3x3 (with the stride), 1x1 to 4 x filters."""

    filters: int
    conv: ModuleDef
    norm: ModuleDef
    act: Callable
    strides: tuple[int, int] = (1, 1)

    @nn.compact
    def __call__(self, x):
        residual = x
        y = self.conv(self.filters, (1, 1))(x)
        y = self.norm()(y)
        y = self.act(y)
        y = self.conv(self.filters, (3, 3), self.strides)(y)
        y = self.norm()(y)
        y = self.act(y)
        y = self.conv(self.filters * 4, (1, 1))(y)
        y = self.norm(scale_init=nn.initializers.zeros_init())(y)
        if residual.shape != y.shape:
            residual = self.conv(self.filters * 4, (1, 1), self.strides, name="conv_proj")(residual)
            residual = self.norm(name="norm_proj")(residual)
        return self.act(residual + y)


class ResNet(nn.Module):
    stage_sizes: tuple[int, ...]
    block_cls: ModuleDef
    num_classes: int = NUM_CLASSES
    num_filters: int = STEM_WIDTH
    dtype: Any = jnp.float32
    act: Callable = nn.relu
    axis_name: str | None = "batch"  # batch statistics averaged over this pmap axis

    @nn.compact
    def __call__(self, x, train: bool = True):
        conv = functools.partial(nn.Conv, use_bias=False, dtype=self.dtype)
        norm = functools.partial(
            nn.BatchNorm,
            use_running_average=not train,
            momentum=0.9,
            epsilon=1e-5,
            dtype=self.dtype,
            axis_name=self.axis_name if train else None,
        )
        x = conv(self.num_filters, (7, 7), (2, 2), padding=[(3, 3), (3, 3)], name="conv_init")(x)
        x = norm(name="bn_init")(x)
        x = nn.relu(x)
        x = nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
        for i, block_size in enumerate(self.stage_sizes):
            for j in range(block_size):
                strides = (2, 2) if i > 0 and j == 0 else (1, 1)
                x = self.block_cls(
                    STAGE_WIDTHS[i] * self.num_filters // STEM_WIDTH,
                    strides=strides,
                    conv=conv,
                    norm=norm,
                    act=self.act,
                )(x)
        x = jnp.mean(x, axis=(1, 2))
        x = nn.Dense(self.num_classes, dtype=self.dtype)(x)
        return jnp.asarray(x, self.dtype)


def make_model(cfg: ResNetConfig, *, dtype, num_classes: int = NUM_CLASSES, axis_name: str | None = "batch") -> ResNet:
    block = BottleneckResNetBlock if cfg.block == "bottleneck" else ResNetBlock
    return ResNet(
        stage_sizes=tuple(cfg.stage_sizes), block_cls=block, num_classes=num_classes, dtype=dtype, axis_name=axis_name
    )
