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


# ---------------------------------------------------------------------------
# LLaMA-3-architecture decoders (`costmodel workloads export llama3-*`)
# ---------------------------------------------------------------------------
#
# Architecture (Meta's Llama 3, "The Llama 3 Herd of Models", arXiv:2407.21783): token
# embedding, L pre-norm decoder layers (RMSNorm -> grouped-query attention with RoPE ->
# residual; RMSNorm -> SwiGLU MLP -> residual), final RMSNorm, output projection to the
# vocabulary. No biases. The training step is in `export.py` (`llama_step`).
#
# Sizes: the ISPASS 2026 paper (imec hespas) evaluates LLaMA-3-architecture models named
# 100m, 200m, 500m, 1b, 2b and 3b (FSDP on 4 GPUs). Only the 100m configuration is
# published (hespas docs/tutorials/ispass_2026_workshop.rst, the MaxText `llama3-100m.yml`
# it exports); the other five are not in the hespas or hespas_workloads repositories
# (searched 2026: code, docs, experiment scripts, workload logs). So:
# - llama3-100m: the paper's configuration exactly (MaxText base_emb_dim 576, 9 query and
#   9 kv heads of head_dim 128, 7 decoder layers, mlp_dim 2016, vocab 128256, untied
#   output projection `logits_via_embedding: False`, rope_max_timescale 500000, eps 1e-5);
# - llama3-1b, llama3-3b: Meta's Llama 3.2 1B and 3B (their Hugging Face `config.json`:
#   hidden 2048 / 3072, 16 / 28 layers, 32 / 24 heads, 8 kv heads, intermediate 8192,
#   head_dim 64 / 128, tied embeddings, rope_theta 500000);
# - llama3-8b: Meta's Llama 3 8B (hidden 4096, 32 layers, 32 heads, 8 kv heads,
#   intermediate 14336, vocab 128256, untied, rope_theta 500000);
# - llama3-200m, llama3-500m, llama3-2b: OURS, not the paper's (unpublished): Llama 3.2
#   1B's recipe (head_dim 64, 8 kv heads, intermediate = 4 x hidden, tied embeddings,
#   vocab 128256) with the hidden size a multiple of 512 and the layer count chosen so
#   that the nominal size below comes out nearest the name.
# Nominal size = parameters without an untied output projection (embedding table counted
# once): 117M for the paper's 100m (191M with its untied head), equal to the total for
# the tied models. `llama_param_count` gives the exact totals (docs/workloads.md).
#
# RoPE frequency scaling of Llama 3.1/3.2 (`rope_scaling`) is left out: it only changes
# constant frequencies, not the program's ops or shapes.

LLAMA_VOCAB = 128256
LLAMA_ROPE_THETA = 500000.0
LLAMA_NORM_EPS = 1e-5


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    name: str
    hidden: int  # model dimension d
    layers: int
    heads: int  # query heads
    kv_heads: int
    head_dim: int
    ffn: int  # SwiGLU intermediate size
    vocab: int = LLAMA_VOCAB
    tied_embeddings: bool = False  # the output projection is the embedding table's transpose
    rope_theta: float = LLAMA_ROPE_THETA
    norm_eps: float = LLAMA_NORM_EPS
    source: str = ""

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    def with_layers(self, layers: int) -> "LlamaConfig":
        return dataclasses.replace(self, layers=layers)


LLAMA_MODELS: dict[str, LlamaConfig] = {
    c.name: c
    for c in (
        LlamaConfig(
            "llama3-100m", 576, 7, 9, 9, 128, 2016, tied_embeddings=False,
            source="ISPASS 2026 paper (hespas docs/tutorials/ispass_2026_workshop.rst, MaxText llama3-100m.yml)",
        ),
        LlamaConfig(
            "llama3-200m", 1024, 4, 16, 8, 64, 4096, tied_embeddings=True,
            source="ours (paper's unpublished): Llama 3.2 1B recipe scaled to 194M",
        ),
        LlamaConfig(
            "llama3-500m", 1536, 9, 24, 8, 64, 6144, tied_embeddings=True,
            source="ours (paper's unpublished): Llama 3.2 1B recipe scaled to 508M",
        ),
        LlamaConfig(
            "llama3-1b", 2048, 16, 32, 8, 64, 8192, tied_embeddings=True,
            source="Meta Llama 3.2 1B (meta-llama/Llama-3.2-1B config.json)",
        ),
        LlamaConfig(
            "llama3-2b", 2560, 18, 40, 8, 64, 10240, tied_embeddings=True,
            source="ours (paper's unpublished): Llama 3.2 1B recipe scaled to 2.03B",
        ),
        LlamaConfig(
            "llama3-3b", 3072, 28, 24, 8, 128, 8192, tied_embeddings=True,
            source="Meta Llama 3.2 3B (meta-llama/Llama-3.2-3B config.json)",
        ),
        LlamaConfig(
            "llama3-8b", 4096, 32, 32, 8, 128, 14336, tied_embeddings=False,
            source="Meta Llama 3 8B (meta-llama/Meta-Llama-3-8B config.json; arXiv:2407.21783 Table 3)",
        ),
    )
}


def llama_layer_params(cfg: LlamaConfig) -> int:
    """One decoder layer: wq (d x H hd), wk and wv (d x KV hd), wo (H hd x d), the three
    SwiGLU matrices (gate and up d x F, down F x d) and the two RMSNorm scales (d each)."""
    d = cfg.hidden
    return d * cfg.q_dim + 2 * d * cfg.kv_dim + cfg.q_dim * d + 3 * d * cfg.ffn + 2 * d


def llama_param_count(cfg: LlamaConfig) -> int:
    """Every parameter: embedding (V x d), L layers, final norm (d), and the output
    projection (d x V) unless tied to the embedding."""
    embed = cfg.vocab * cfg.hidden
    head = 0 if cfg.tied_embeddings else cfg.hidden * cfg.vocab
    return embed + cfg.layers * llama_layer_params(cfg) + cfg.hidden + head


def llama_nominal_params(cfg: LlamaConfig) -> int:
    """The count the names follow: all parameters but an untied output projection."""
    return cfg.vocab * cfg.hidden + cfg.layers * llama_layer_params(cfg) + cfg.hidden


def llama_param_leaves(cfg: LlamaConfig) -> int:
    """Parameter arrays: embedding, 9 per layer (7 matrices, 2 norm scales), final norm,
    and the output projection when untied."""
    return 1 + 9 * cfg.layers + 1 + (0 if cfg.tied_embeddings else 1)


def llama_matmul_flops_per_token(cfg: LlamaConfig, seq_len: int) -> int:
    """Forward matmul FLOPs per token (2 per multiply-add): the projections and the output
    head (2 x parameters of the matrices), and causal attention's two products over the
    whole sequence (2 x 2 x S x H hd, counted over the full S x S score matrix as the
    program computes it, masked or not). The embedding lookup (a gather) is none."""
    d = cfg.hidden
    proj = d * cfg.q_dim + 2 * d * cfg.kv_dim + cfg.q_dim * d + 3 * d * cfg.ffn
    attn = 2 * seq_len * cfg.q_dim
    return 2 * (cfg.layers * (proj + attn) + d * cfg.vocab)
