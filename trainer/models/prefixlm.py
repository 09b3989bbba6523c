"""SimVLM's PrefixLM: an encoder-decoder Transformer trained from scratch.

Each packed document is split by the data side into a prefix (all its image
slots, then a leading span of its text) and the rest. The encoder reads the
prefixes with attention bidirectional within each document; the decoder
generates the rest, causal within each document, and its cross-attention
sees only its own document's prefix. The loss is on decoder text only.

- Images pass a convolutional stem, the first residual stages of a
  torchvision ResNet, and a patch convolution; each grid cell becomes one
  encoder token in place of an image slot, so the grid's cell count must be
  the build's ``tokens_per_image`` (the loop checks it before any step).
- Attention (``config.attention``) keeps to each document without an
  ``L × L`` mask (``varlen``, the default, or ``flex`` on CUDA), or with one
  (``dense``, the reference): ``trainer.models.attention``.
- Positions are learned 1-D embeddings indexed by the batch's per-document
  positions (they restart at 0 for every packed document); there are no
  modality embeddings. Input and output embeddings are tied.
- The stem normalises with GroupNorm rather than BatchNorm (as BiT and the
  ViT hybrids do): a sample's features then do not depend on the other
  images of its batch, empty image slots included.

    >>> import torch
    >>> from trainer.config import prefixlm_config
    >>> torch.manual_seed(0) and None
    >>> model = PrefixLM(prefixlm_config("tiny"), vocab_size=50, seq_len=8, image_token_id=50)
    >>> model.tokens_per_image
    16
"""

from __future__ import annotations

import torch
from torch import nn

from trainer.config import PrefixLMConfig
from trainer.models.attention import Attend, document_attention
from trainer.models.flops import attention_flops, forward_flops, matmul_parameters
from trainer.models.loss import chunked_cross_entropy
from trainer.models.slots import image_features, place_images

IMAGENET_MEAN = (0.485, 0.456, 0.406)  # what torchvision's ResNets are normalised with
IMAGENET_STD = (0.229, 0.224, 0.225)


def _group_norm(channels: int) -> nn.GroupNorm:
    return nn.GroupNorm(32, channels)


class ConvStem(nn.Module):
    """Images ``[N, 3, H, W]`` → patch embeddings ``[N, grid * grid, width]``."""

    def __init__(self, config: PrefixLMConfig):
        super().__init__()
        import torchvision

        resnet = getattr(torchvision.models, config.stem)(weights=None, norm_layer=_group_norm)
        stages = [resnet.layer1, resnet.layer2, resnet.layer3][: config.stem_stages]
        self.body = nn.Sequential(resnet.conv1, resnet.bn1, resnet.relu, resnet.maxpool, *stages)
        channels = 64 * 2 ** (config.stem_stages - 1) * type(stages[-1][-1]).expansion
        self.patches = nn.Conv2d(
            channels, config.width, kernel_size=config.patch_size, stride=config.patch_size
        )

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.patches(self.body(images)).flatten(2).transpose(1, 2)


class MultiHeadAttention(nn.Module):
    def __init__(self, width: int, heads: int, dropout: float):
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(width, width)
        self.key = nn.Linear(width, width)
        self.value = nn.Linear(width, width)
        self.out = nn.Linear(width, width)
        self.dropout = nn.Dropout(dropout)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        return x.unflatten(-1, (self.heads, -1)).transpose(1, 2)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, attend: Attend) -> torch.Tensor:
        q, k, v = (
            self._split(self.query(x)),
            self._split(self.key(memory)),
            self._split(self.value(memory)),
        )
        return self.dropout(self.out(attend(q, k, v).transpose(1, 2).flatten(2)))


class Block(nn.Module):
    """A pre-LayerNorm Transformer layer; with ``cross``, a decoder layer."""

    def __init__(self, width: int, heads: int, mlp_dim: int, dropout: float, cross: bool):
        super().__init__()
        self.attention_norm = nn.LayerNorm(width)
        self.attention = MultiHeadAttention(width, heads, dropout)
        self.cross_norm = nn.LayerNorm(width) if cross else None
        self.cross = MultiHeadAttention(width, heads, dropout) if cross else None
        self.mlp_norm = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, mlp_dim),
            nn.GELU(),
            nn.Linear(mlp_dim, width),
            nn.Dropout(dropout),
        )

    def forward(self, x, attend: Attend, memory=None, cross_attend: Attend | None = None):
        normed = self.attention_norm(x)
        x = x + self.attention(normed, normed, attend)
        if self.cross is not None:
            x = x + self.cross(self.cross_norm(x), memory, cross_attend)
        return x + self.mlp(self.mlp_norm(x))


class PrefixLM(nn.Module):
    """The model: ``vocab_size`` text pieces (input and output), positions up to ``seq_len``."""

    objective = "prefixlm"
    image_mean = IMAGENET_MEAN
    image_std = IMAGENET_STD
    dense_attention = "dense"
    fsdp_preferred = False  # every size fits one device: DDP unless FSDP2 is asked for

    def __init__(
        self, config: PrefixLMConfig, *, vocab_size: int, seq_len: int, image_token_id: int | None
    ):
        super().__init__()
        self.config = config
        self.vocab_size = vocab_size
        self.max_positions = seq_len
        self.image_token_id = image_token_id
        self.tokens_per_image = config.tokens_per_image
        self.image_size = config.image_size
        self.attention = config.attention
        self.static_shapes = False  # the runtime sets it on XLA
        self.image_source = (
            f"PrefixLM {config.size} ({config.image_size} px, {config.stem} stem stride "
            f"{config.stem_stride}, patch {config.patch_size})"
        )
        width, heads, mlp, dropout = config.width, config.heads, config.mlp_dim, config.dropout
        self.token_embedding = nn.Embedding(vocab_size, width)
        self.encoder_positions = nn.Embedding(seq_len, width)
        self.decoder_positions = nn.Embedding(seq_len, width)
        self.stem = ConvStem(config)
        self.encoder = nn.ModuleList(
            Block(width, heads, mlp, dropout, cross=False) for _ in range(config.encoder_layers)
        )
        self.encoder_norm = nn.LayerNorm(width)
        self.decoder = nn.ModuleList(
            Block(width, heads, mlp, dropout, cross=True) for _ in range(config.decoder_layers)
        )
        self.decoder_norm = nn.LayerNorm(width)
        self.dropout = nn.Dropout(dropout)
        for name, module in self.named_modules():
            if name.startswith("stem.body"):
                continue  # torchvision's own (He) initialisation
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        # counted here, before any wrapping shards the stem's weights
        size = config.image_size
        self.stem_flops = 3 * forward_flops(self.stem, (1, 3, size, size))

    def materialize(self, device: torch.device) -> None:
        """Nothing to do: PrefixLM is built with its weights, never on the meta device."""

    def shard_layers(self) -> list[nn.Module]:
        """The units FSDP2 shards, when asked to (DDP is the default: the sizes fit one device)."""
        return [*self.encoder, *self.decoder]

    @staticmethod
    def count_targets(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return batch["decoder_loss_weights"].sum()

    def step_flops(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Training FLOPs of ``batch`` (``trainer.models.flops``, factor 6): the encoder's
        layers on every prefix token, the decoder's and the output projection on every
        other; self-attention in each, cross-attention to the document's prefix; the
        stem's forward and backward (3 forwards) on every image."""
        encoder, decoder = batch["encoder_segment_ids"], batch["decoder_segment_ids"]
        width, config = self.config.width, self.config
        return (
            6 * matmul_parameters(self.encoder) * (encoder > 0).sum()
            + 6 * (matmul_parameters(self.decoder) + self.vocab_size * width) * (decoder > 0).sum()
            + attention_flops(encoder, layers=config.encoder_layers, width=width, factor=6)
            + attention_flops(decoder, layers=config.decoder_layers, width=width, factor=6)
            + attention_flops(decoder, encoder, layers=config.decoder_layers, width=width, factor=6)
            + self.stem_flops * batch["image_mask"].sum()
        )

    def _embed(self, ids: torch.Tensor) -> torch.Tensor:
        if self.image_token_id is not None:
            ids = ids.masked_fill(ids == self.image_token_id, 0)  # the slot's patch replaces it
        return self.token_embedding(ids)

    def encode(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        ids = batch["encoder_input_ids"]
        x = self._embed(ids)
        if self.image_token_id is not None and batch["images"].shape[1]:
            features = image_features(
                self.stem,
                batch["images"],
                batch["image_mask"],
                self.tokens_per_image,
                self.config.width,
                self.static_shapes,
            )
            x = place_images(x, ids, self.image_token_id, features)
        x = self.dropout(x + self.encoder_positions(batch["encoder_positions"]))
        segments = batch["encoder_segment_ids"]
        attend = document_attention(self.attention, segments, segments, causal=False)
        for block in self.encoder:
            x = block(x, attend)
        return self.encoder_norm(x)

    def logits(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """``[B, L, vocab_size]`` over the decoder positions."""
        return self.decode(batch) @ self.token_embedding.weight.T

    def decode(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The decoder's last hidden states ``[B, L, width]``."""
        memory = self.encode(batch)
        segments = batch["decoder_segment_ids"]
        x = self._embed(batch["decoder_input_ids"])
        x = self.dropout(x + self.decoder_positions(batch["decoder_positions"]))
        kind = self.attention
        attend = document_attention(kind, segments, segments, causal=True)
        cross = document_attention(kind, segments, batch["encoder_segment_ids"], causal=False)
        for block in self.decoder:
            x = block(x, attend, memory, cross)
        return self.decoder_norm(x)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The loss summed over the decoder's weighted target tokens (float32), a chunk of
        positions at a time (``trainer.models.loss``)."""
        return chunked_cross_entropy(
            self.decode(batch),
            self.token_embedding.weight,
            batch["decoder_target_ids"],
            batch["decoder_loss_weights"],
            static_shapes=self.static_shapes,
        )
