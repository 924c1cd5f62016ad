"""Four model families the project was never tuned on, registered in the zoo (`remat_bench.torch.zoo.ZOO`).

Plain `torch.nn` modules (no torchvision, timm or transformers), each a kind of graph the
zoo's other models are not (issue 46):

| name | architecture | default input (per sample) | task |
| --- | --- | --- | --- |
| ``gru`` | 2-layer GRU of ``nn.GRUCell`` over 32 steps, hidden 256; last state classified | (32, 64) | classify |
| ``dunet`` | diffusion U-Net: GroupNorm, SiLU, attention at 16x16 and 8x8, cat skips | (3, 32, 32) | regress |
| ``moe`` | decoder, 4 blocks of width 256, top-2 of 4 SwiGLU experts, dense dispatch | (128,) ids | language |
| ``convnext`` | ConvNeXt: 4x4 stem, depthwise 7x7, channels-last LayerNorm, MLP 4x | (3, 64, 64) | classify |

What makes each hard for a rematerialization planner:

- ``gru``: one cell's weights serve every time step (Gruslys et al. 2016), so the graph is a long
  chain of identical small blocks whose parameters are read ``steps`` times; its forward has
  ``layers + 2 + 14 layers steps`` nodes after import (a GRU cell traces to 14 operators).
- ``dunet``: the noise predictor of a DDPM (Ho et al. 2020): every down-path activation is kept
  to the up path and concatenated there (``torch.cat``), so long-lived values cross the whole
  network; the timestep is a constant (the import takes one input), embedded once and read by
  every residual block.
- ``moe``: a Switch/Mixtral-style feed-forward (Fedus et al. 2022; Jiang et al. 2024) with dense
  dispatch: every expert runs on every token and the softmax gate, masked to its top 2
  (``torch.topk`` then ``scatter``), weighs their outputs; wide fan-out from each block's input.
- ``convnext``: Liu et al. 2022: a patchify stem, depthwise 7x7 convolutions, LayerNorm over
  channels in channels-last layout (permutes), an inverted MLP (4x) and layer scale.

Keyword arguments scale the models (``steps``/``hidden``/``layers``/``features`` for the GRU,
``width``/``mults``/``blocks`` for the U-Net, ``layers``/``width``/``heads``/``experts``/``top``/
``vocab`` for the MoE, ``dims``/``depths`` for ConvNeXt). None uses dropout.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

# The families' zoo names, in the order the zoo lists them.
NAMES = ("gru", "dunet", "moe", "convnext")


# ---------------------------------------------------------------------- recurrent


class UnrolledGRU(nn.Module):
    """A stack of ``layers`` `nn.GRUCell`s unrolled over ``steps`` time steps, the last state classified.

    Each layer's cell is one module called at every step: its weights are shared across time, as in
    any recurrent network trained by backpropagation through time.
    """

    def __init__(self, features: int = 64, hidden: int = 256, layers: int = 2, steps: int = 32,
                 num_classes: int = 10) -> None:
        super().__init__()
        self.steps = steps
        self.hidden = hidden
        self.cells = nn.ModuleList(nn.GRUCell(features if i == 0 else hidden, hidden) for i in range(layers))
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits of a batch of sequences, from the top layer's state after the last step.

        Parameters
        ----------
        x : torch.Tensor
            Sequences (N, steps, features); only the first ``steps`` steps are read.

        Returns
        -------
        torch.Tensor
            Logits (N, num_classes).
        """
        states = [x.new_zeros(x.shape[0], self.hidden) for _ in self.cells]
        for t in range(self.steps):
            h = x[:, t]
            for i, cell in enumerate(self.cells):
                h = states[i] = cell(h, states[i])
        return self.head(states[-1])


# ---------------------------------------------------------------------- diffusion U-Net


def sinusoidal_embedding(timestep: float, dim: int) -> torch.Tensor:
    """The Transformer's sinusoidal encoding of one diffusion timestep (Ho et al. 2020, Appendix B).

    Parameters
    ----------
    timestep : float
        The timestep.
    dim : int
        Length of the encoding (even).

    Returns
    -------
    torch.Tensor
        (1, dim): sines of the first half of the frequencies, then cosines.
    """
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
    angles = timestep * freqs
    return torch.cat([torch.sin(angles), torch.cos(angles)])[None]


class DiffusionResBlock(nn.Module):
    """GroupNorm, SiLU, 3x3 convolution, plus the projected timestep embedding; again; plus the shortcut."""

    def __init__(self, c_in: int, c_out: int, emb_dim: int, groups: int) -> None:
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, c_in)
        self.conv1 = nn.Conv2d(c_in, c_out, 3, padding=1)
        self.emb = nn.Linear(emb_dim, c_out)
        self.norm2 = nn.GroupNorm(groups, c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1)
        self.shortcut = nn.Identity() if c_in == c_out else nn.Conv2d(c_in, c_out, 1)

    def forward(self, x: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        """The block's output.

        Parameters
        ----------
        x : torch.Tensor
            Feature maps (N, c_in, H, W).
        emb : torch.Tensor
            The timestep embedding after its SiLU (1, emb_dim), the same for every sample.

        Returns
        -------
        torch.Tensor
            Feature maps (N, c_out, H, W).
        """
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.emb(emb)[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        return h + self.shortcut(x)


class SpatialSelfAttention(nn.Module):
    """Single-head self-attention over the H x W positions of a feature map, pre-normed, residual."""

    def __init__(self, channels: int, groups: int) -> None:
        super().__init__()
        self.norm = nn.GroupNorm(groups, channels)
        self.qkv = nn.Conv2d(channels, 3 * channels, 1)
        self.proj = nn.Conv2d(channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` plus attention of every position to every other.

        Parameters
        ----------
        x : torch.Tensor
            Feature maps (N, C, H, W).

        Returns
        -------
        torch.Tensor
            Feature maps (N, C, H, W).
        """
        n, c, height, width = x.shape
        q, k, v = self.qkv(self.norm(x)).flatten(2).transpose(1, 2).split(c, dim=2)
        h = F.scaled_dot_product_attention(q, k, v)
        return x + self.proj(h.transpose(1, 2).reshape(n, c, height, width))


class DiffusionUNet(nn.Module):
    """A DDPM-style noise predictor (Ho et al. 2020): residual blocks and attention, mirrored with skips.

    ``len(mults)`` resolutions, ``blocks`` residual blocks each on the way down (every output kept
    as a skip) and ``blocks + 1`` on the way up (each reading one skip, concatenated); attention
    after the blocks at the resolutions whose index is in ``attention`` (default: the second, 16x16
    on a 32x32 input) and between the two middle blocks (8x8).
    The timestep is the constant ``timestep``: its sinusoidal encoding is a buffer, embedded by an
    MLP in the traced step.
    """

    def __init__(self, in_channels: int = 3, width: int = 32, mults: tuple[int, ...] = (1, 2, 2),
                 blocks: int = 1, attention: tuple[int, ...] = (1,), groups: int = 8,
                 timestep: float = 500.0) -> None:
        super().__init__()
        emb_dim = 4 * width
        self.register_buffer("t_encoding", sinusoidal_embedding(timestep, width))
        self.t_mlp = nn.Sequential(nn.Linear(width, emb_dim), nn.SiLU(), nn.Linear(emb_dim, emb_dim))
        self.stem = nn.Conv2d(in_channels, width, 3, padding=1)
        self.down = nn.ModuleList()
        self.down_attn = nn.ModuleList()
        self.downsample = nn.ModuleList()
        skips = [width]
        c = width
        for level, mult in enumerate(mults):
            for _ in range(blocks):
                self.down.append(DiffusionResBlock(c, width * mult, emb_dim, groups))
                c = width * mult
                self.down_attn.append(SpatialSelfAttention(c, groups) if level in attention else nn.Identity())
                skips.append(c)
            if level < len(mults) - 1:
                self.downsample.append(nn.Conv2d(c, c, 3, stride=2, padding=1))
                skips.append(c)
        self.mid1 = DiffusionResBlock(c, c, emb_dim, groups)
        self.mid_attn = SpatialSelfAttention(c, groups)
        self.mid2 = DiffusionResBlock(c, c, emb_dim, groups)
        self.up = nn.ModuleList()
        self.up_attn = nn.ModuleList()
        self.upsample = nn.ModuleList()
        for level, mult in reversed(list(enumerate(mults))):
            for _ in range(blocks + 1):
                self.up.append(DiffusionResBlock(c + skips.pop(), width * mult, emb_dim, groups))
                c = width * mult
                self.up_attn.append(SpatialSelfAttention(c, groups) if level in attention else nn.Identity())
            if level > 0:
                self.upsample.append(nn.Conv2d(c, c, 3, padding=1))
        self.blocks = blocks
        self.levels = len(mults)
        self.out_norm = nn.GroupNorm(groups, c)
        self.out = nn.Conv2d(c, in_channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The predicted noise of a batch of noisy images.

        Parameters
        ----------
        x : torch.Tensor
            Images (N, in_channels, H, W), H and W divisible by ``2 ** (len(mults) - 1)``.

        Returns
        -------
        torch.Tensor
            Predicted noise, the shape of ``x``.
        """
        emb = F.silu(self.t_mlp(self.t_encoding))  # once: every block reads the same
        h = self.stem(x)
        skips = [h]
        down = iter(zip(self.down, self.down_attn))
        for level in range(self.levels):
            for _ in range(self.blocks):
                block, attn = next(down)
                h = attn(block(h, emb))
                skips.append(h)
            if level < self.levels - 1:
                h = self.downsample[level](h)
                skips.append(h)
        h = self.mid2(self.mid_attn(self.mid1(h, emb)), emb)
        up = iter(zip(self.up, self.up_attn))
        for level in reversed(range(self.levels)):
            for _ in range(self.blocks + 1):
                block, attn = next(up)
                h = attn(block(torch.cat([h, skips.pop()], dim=1), emb))
            if level > 0:
                h = self.upsample[self.levels - 1 - level](F.interpolate(h, scale_factor=2.0, mode="nearest"))
        return self.out(F.silu(self.out_norm(h)))


# ---------------------------------------------------------------------- mixture of experts


class CausalSelfAttention(nn.Module):
    """Causal multi-head self-attention: the zoo GPT's (`remat_bench.torch.zoo`), and the MoE decoder's."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        if width % heads:
            raise ValueError(f"width {width} is not a multiple of heads {heads}")
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Causal multi-head self-attention over a sequence.

        Parameters
        ----------
        x : torch.Tensor
            Activations (N, T, width).

        Returns
        -------
        torch.Tensor
            Activations (N, T, width).
        """
        n, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(n, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        h = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(h.transpose(1, 2).reshape(n, t, c))


class SwiGLUExpert(nn.Module):
    """One expert: a SwiGLU feed-forward, ``w2(silu(w1 x) * w3 x)`` (Shazeer 2020), as Mixtral's."""

    def __init__(self, width: int, ffn: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(width, ffn, bias=False)
        self.w3 = nn.Linear(width, ffn, bias=False)
        self.w2 = nn.Linear(ffn, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The expert's output.

        Parameters
        ----------
        x : torch.Tensor
            Activations (..., width).

        Returns
        -------
        torch.Tensor
            Activations (..., width).
        """
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class DenseMoE(nn.Module):
    """``experts`` SwiGLU experts, every one run on every token, weighed by the softmax gate kept at its top ``top``.

    The gate's probabilities outside each token's top ``top`` are set to 0 (``torch.topk``, then
    ``scatter`` into zeros) and the rest renormalized, as Mixtral does (Jiang et al. 2024); the
    dispatch is dense, so the graph has every expert's activations for every token, each read by
    the gated sum.
    """

    def __init__(self, width: int, experts: int, top: int, ffn: int) -> None:
        super().__init__()
        if not 1 <= top <= experts:
            raise ValueError(f"top {top} must lie between 1 and experts {experts}")
        self.top = top
        self.gate = nn.Linear(width, experts, bias=False)
        self.experts = nn.ModuleList(SwiGLUExpert(width, ffn) for _ in range(experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The gated sum of the experts' outputs.

        Parameters
        ----------
        x : torch.Tensor
            Activations (N, T, width).

        Returns
        -------
        torch.Tensor
            Activations (N, T, width).
        """
        probs = F.softmax(self.gate(x), dim=-1)
        top, index = torch.topk(probs, self.top, dim=-1)
        weights = torch.zeros_like(probs).scatter(-1, index, top / top.sum(-1, keepdim=True))
        out = x.new_zeros(x.shape)
        for e, expert in enumerate(self.experts):
            out = out + weights[..., e:e + 1] * expert(x)  # 0 for a token outside the expert's top
        return out


class MoEBlock(nn.Module):
    """Pre-norm causal attention, then a pre-norm mixture of experts, each added to its input."""

    def __init__(self, width: int, heads: int, experts: int, top: int, ffn: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads)
        self.ln2 = nn.LayerNorm(width)
        self.moe = DenseMoE(width, experts, top, ffn)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Attention then experts, each pre-normed and residual.

        Parameters
        ----------
        x : torch.Tensor
            Activations (N, T, width).

        Returns
        -------
        torch.Tensor
            Activations (N, T, width).
        """
        x = x + self.attn(self.ln1(x))
        return x + self.moe(self.ln2(x))


class MoEDecoder(nn.Module):
    """A decoder of ``layers`` `MoEBlock`s between token and position embeddings and an untied head."""

    def __init__(self, vocab: int = 1024, max_seq: int = 1024, width: int = 256, layers: int = 4, heads: int = 4,
                 experts: int = 4, top: int = 2, ffn: int | None = None) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(max_seq, width)
        self.blocks = nn.Sequential(*(MoEBlock(width, heads, experts, top, ffn or 2 * width) for _ in range(layers)))
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Next-token logits of a batch of sequences.

        Parameters
        ----------
        tokens : torch.Tensor
            Token ids (N, T), T at most ``max_seq``.

        Returns
        -------
        torch.Tensor
            Logits (N, T, vocab).
        """
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        h = self.tok(tokens) + self.pos(positions)
        return self.head(self.ln_f(self.blocks(h)))


# ---------------------------------------------------------------------- ConvNeXt


class ChannelsLastNorm(nn.Module):
    """LayerNorm over the channels of (N, C, H, W) maps, computed channels-last (permute, norm, permute back)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(channels, eps=1e-6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The normalized maps.

        Parameters
        ----------
        x : torch.Tensor
            Feature maps (N, C, H, W).

        Returns
        -------
        torch.Tensor
            Feature maps (N, C, H, W).
        """
        return self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class ConvNeXtBlock(nn.Module):
    """Depthwise 7x7 convolution, channels-last LayerNorm, Linear 4x, GELU, Linear, layer scale, residual."""

    def __init__(self, dim: int, layer_scale: float = 1e-6) -> None:
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.gamma = nn.Parameter(torch.full((dim,), layer_scale))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` plus the block's scaled branch.

        Parameters
        ----------
        x : torch.Tensor
            Feature maps (N, dim, H, W).

        Returns
        -------
        torch.Tensor
            Feature maps (N, dim, H, W).
        """
        h = self.dwconv(x).permute(0, 2, 3, 1)  # channels last: LayerNorm and Linear act on the last axis
        h = self.gamma * self.mlp(self.norm(h))
        return x + h.permute(0, 3, 1, 2)


class ConvNeXt(nn.Module):
    """Liu et al. 2022: a 4x4 stride-4 stem, stages of `ConvNeXtBlock`s with 2x2 stride-2 downsampling between."""

    def __init__(self, in_channels: int = 3, dims: tuple[int, ...] = (32, 64, 128, 256),
                 depths: tuple[int, ...] = (2, 2, 4, 2), num_classes: int = 10) -> None:
        super().__init__()
        if len(dims) != len(depths):
            raise ValueError(f"dims {dims} and depths {depths} must have one entry per stage")
        self.stem = nn.Sequential(nn.Conv2d(in_channels, dims[0], 4, stride=4), ChannelsLastNorm(dims[0]))
        self.stages = nn.ModuleList()
        for i, (dim, depth) in enumerate(zip(dims, depths)):
            down: list[nn.Module] = [] if i == 0 else [ChannelsLastNorm(dims[i - 1]),
                                                       nn.Conv2d(dims[i - 1], dim, 2, stride=2)]
            self.stages.append(nn.Sequential(*down, *(ConvNeXtBlock(dim) for _ in range(depth))))
        self.norm = nn.LayerNorm(dims[-1], eps=1e-6)
        self.head = nn.Linear(dims[-1], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits of a batch of images.

        Parameters
        ----------
        x : torch.Tensor
            Images (N, in_channels, H, W), H and W divisible by ``4 * 2 ** (len(dims) - 1)``.

        Returns
        -------
        torch.Tensor
            Logits (N, num_classes).
        """
        h = self.stem(x)
        for stage in self.stages:
            h = stage(h)
        return self.head(self.norm(h.mean((2, 3))))
