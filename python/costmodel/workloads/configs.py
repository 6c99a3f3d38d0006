"""The ResNet configurations of the evaluation workloads, and their sizes computed by hand.

Pure Python (no jax): `costmodel workloads list` and the documentation use it, and the
tests check it against the flax model (`resnet.py`) and against the exported module.

The architecture is the one of flax's examples/imagenet `models.py` (He et al. 2016,
"v1.5": the stride of a bottleneck block sits on its 3x3 convolution):

- stem: 7x7/2 convolution to 64 channels (padding 3), batch norm, ReLU, 3x3/2 max pool
  (padding SAME);
- four stages of blocks with widths 64, 128, 256, 512; the first block of stages 2-4
  has stride 2;
- basic block: 3x3 conv, BN, ReLU, 3x3 conv, BN, + shortcut, ReLU (output = width);
- bottleneck block: 1x1 conv, BN, ReLU, 3x3 conv (stride), BN, ReLU, 1x1 conv to
  4 x width, BN, + shortcut, ReLU;
- projection shortcut (1x1 conv with the block's stride + BN) wherever the block changes
  the shape of its input (the first block of every stage whose input has another channel
  count or resolution);
- global average pool, dense layer to the classes (with bias);
- convolutions have no bias; every convolution is followed by a batch norm (scale and
  bias are parameters, mean and variance are batch statistics).
"""

from __future__ import annotations

import dataclasses

STEM_WIDTH = 64
STAGE_WIDTHS = (64, 128, 256, 512)
NUM_CLASSES = 1000
IMAGE_SIZE = 224


@dataclasses.dataclass(frozen=True)
class ResNetConfig:
    name: str
    block: str  # "basic" or "bottleneck"
    stage_sizes: tuple[int, ...]  # blocks per stage

    @property
    def expansion(self) -> int:
        """Output channels of a block over its width."""
        return 4 if self.block == "bottleneck" else 1

    @property
    def convs_per_block(self) -> int:
        return 3 if self.block == "bottleneck" else 2

    @property
    def num_blocks(self) -> int:
        return sum(self.stage_sizes)

    @property
    def depth(self) -> int:
        """The number in the name: weighted layers on the main path (convolutions + dense)."""
        return 1 + self.convs_per_block * self.num_blocks + 1


MODELS: dict[str, ResNetConfig] = {
    c.name: c
    for c in (
        ResNetConfig("resnet18", "basic", (2, 2, 2, 2)),
        ResNetConfig("resnet34", "basic", (3, 4, 6, 3)),
        ResNetConfig("resnet50", "bottleneck", (3, 4, 6, 3)),
        ResNetConfig("resnet101", "bottleneck", (3, 4, 23, 3)),
        ResNetConfig("resnet200", "bottleneck", (3, 24, 36, 3)),
    )
}


@dataclasses.dataclass(frozen=True)
class Conv:
    """One convolution of the forward pass (NHWC, no bias)."""

    name: str
    kernel: int  # k for a k x k window
    stride: int
    in_channels: int
    out_channels: int
    in_size: int  # input height = width
    out_size: int

    @property
    def params(self) -> int:
        return self.kernel * self.kernel * self.in_channels * self.out_channels

    @property
    def flops_per_image(self) -> int:
        """2 per multiply-accumulate, as XLA's HloCostAnalysis counts a convolution."""
        return 2 * self.out_size * self.out_size * self.kernel * self.kernel * self.in_channels * self.out_channels


def _down(size: int, stride: int) -> int:
    """Output size of a SAME-padded (or, for the 7x7 stem, padding-3) window with this stride."""
    return -(-size // stride)


def forward_convs(cfg: ResNetConfig, image_size: int = IMAGE_SIZE) -> list[Conv]:
    """Every convolution of the forward pass, in program order."""
    size = image_size
    out = [Conv("conv_init", 7, 2, 3, STEM_WIDTH, size, _down(size, 2))]
    size = _down(_down(size, 2), 2)  # the stem convolution, then the 3x3/2 max pool
    channels = STEM_WIDTH
    for stage, (blocks, width) in enumerate(zip(cfg.stage_sizes, STAGE_WIDTHS)):
        for j in range(blocks):
            stride = 2 if stage > 0 and j == 0 else 1
            name = f"stage{stage + 1}.block{j + 1}"
            out_size = _down(size, stride)
            if cfg.block == "basic":
                out.append(Conv(f"{name}.conv1", 3, stride, channels, width, size, out_size))
                out.append(Conv(f"{name}.conv2", 3, 1, width, width, out_size, out_size))
            else:
                out.append(Conv(f"{name}.conv1", 1, 1, channels, width, size, size))
                out.append(Conv(f"{name}.conv2", 3, stride, width, width, size, out_size))
                out.append(Conv(f"{name}.conv3", 1, 1, width, width * 4, out_size, out_size))
            block_out = width * cfg.expansion
            if channels != block_out or stride != 1:
                out.append(Conv(f"{name}.proj", 1, stride, channels, block_out, size, out_size))
            channels, size = block_out, out_size
    return out


def num_projections(cfg: ResNetConfig) -> int:
    """Projection shortcuts: one per stage whose first block changes the shape (3 for
    basic blocks: stage 1 keeps 64 channels at stride 1; 4 for bottleneck blocks: stage 1
    goes from 64 to 256 channels)."""
    return 3 if cfg.block == "basic" else 4


def num_forward_convs(cfg: ResNetConfig) -> int:
    """F = 1 (stem) + convs_per_block x blocks + projections."""
    return 1 + cfg.convs_per_block * cfg.num_blocks + num_projections(cfg)


def num_train_convs(cfg: ResNetConfig) -> int:
    """Convolutions in a training step: F forward, F weight gradients and F - 1 input
    gradients (the stem's input is the image, whose gradient nobody needs): 3F - 1."""
    return 3 * num_forward_convs(cfg) - 1


def num_batch_norms(cfg: ResNetConfig) -> int:
    """One batch norm after every convolution."""
    return num_forward_convs(cfg)


def final_channels(cfg: ResNetConfig) -> int:
    return STAGE_WIDTHS[-1] * cfg.expansion


def param_count(cfg: ResNetConfig, num_classes: int = NUM_CLASSES) -> int:
    """Trainable parameters: conv kernels, batch-norm scale and bias, dense kernel and bias."""
    convs = forward_convs(cfg)
    conv = sum(c.params for c in convs)
    bn = sum(2 * c.out_channels for c in convs)
    dense = final_channels(cfg) * num_classes + num_classes
    return conv + bn + dense


def param_leaves(cfg: ResNetConfig) -> int:
    """Parameter arrays: F kernels, 2 per batch norm, dense kernel and bias = 3F + 2."""
    return num_forward_convs(cfg) + 2 * num_batch_norms(cfg) + 2


def batch_stat_count(cfg: ResNetConfig) -> int:
    """Non-trainable state: mean and variance of every batch norm."""
    return sum(2 * c.out_channels for c in forward_convs(cfg))


def forward_flops_per_image(cfg: ResNetConfig, image_size: int = IMAGE_SIZE, num_classes: int = NUM_CLASSES) -> int:
    """Convolution and dense FLOPs of one image's forward pass (2 per multiply-add);
    batch norm, ReLU, pooling and the loss are left out (about 1 % more)."""
    conv = sum(c.flops_per_image for c in forward_convs(cfg, image_size))
    return conv + 2 * final_channels(cfg) * num_classes


def train_all_reduces(cfg: ResNetConfig, *, sync_batch_stats: bool = True) -> int:
    """all_reduce ops of one data-parallel training step:
    3F + 2 gradients (one per parameter array), F + F for the batch statistics of the F
    batch norms (forward pmean, and its transpose in the backward pass), 2 metrics
    (loss, accuracy) and, with `sync_batch_stats`, 2F for the new running mean and variance."""
    f = num_forward_convs(cfg)
    return param_leaves(cfg) + 2 * f + 2 + (2 * f if sync_batch_stats else 0)
