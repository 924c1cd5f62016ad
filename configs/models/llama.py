"""A Llama-style decoder built from torch.nn, as a user would bring one: `remat-bench graphs
import-torch llama:llama --input-shape 256 --vocab 4096` traces it from this folder (the
config's folder is on the import path of a sweep config beside it).

Token embedding, pre-norm decoder blocks with RMSNorm, causal self-attention with rotary
position embeddings and grouped-query attention (fewer key/value heads than query heads,
each shared by a group of query heads), a SwiGLU feed-forward (silu(x W1) * (x W3), then W2),
each with a residual; a final RMSNorm and a linear head to the vocabulary. No dropout, as
Llama has none. ``llama()`` defaults to a small shape that fits 2 cores: width 512, 8 query
heads, 2 key/value heads, 8 layers, feed-forward 1,408 (about 8/3 of the width, a multiple of
64), vocabulary 4,096, sequence up to 256.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight (Zhang and Sennrich 2019), as Llama normalises."""

    def __init__(self, width: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotary_tables(head_dim: int, max_seq: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of each position times each frequency (Su et al. 2021), (max_seq, head_dim)."""
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(max_seq, dtype=torch.float32), inv)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding in its rotate-half form: x cos + rotate_half(x) sin."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class Attention(nn.Module):
    """Causal self-attention with rotary positions and grouped-query attention."""

    def __init__(self, width: int, heads: int, kv_heads: int, max_seq: int) -> None:
        super().__init__()
        if width % heads or heads % kv_heads:
            raise ValueError(f"width {width}, heads {heads} and kv_heads {kv_heads} do not divide evenly")
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, width // heads
        self.q = nn.Linear(width, width, bias=False)
        self.kv = nn.Linear(width, 2 * kv_heads * self.head_dim, bias=False)
        self.out = nn.Linear(width, width, bias=False)
        cos, sin = rotary_tables(self.head_dim, max_seq)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, t, c = x.shape
        q = self.q(x).view(n, t, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(x).view(n, t, 2, self.kv_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        cos, sin = self.cos[:t], self.sin[:t]
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        group = self.heads // self.kv_heads  # each key/value head serves this many query heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        h = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(h.transpose(1, 2).reshape(n, t, c))


class SwiGLU(nn.Module):
    """The feed-forward of Llama (Shazeer 2020): W2(silu(x W1) * (x W3))."""

    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(width, hidden, bias=False)
        self.w3 = nn.Linear(width, hidden, bias=False)
        self.w2 = nn.Linear(hidden, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, width: int, heads: int, kv_heads: int, hidden: int, max_seq: int) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(width)
        self.attn = Attention(width, heads, kv_heads, max_seq)
        self.ffn_norm = RMSNorm(width)
        self.ffn = SwiGLU(width, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x))
        return x + self.ffn(self.ffn_norm(x))


class Llama(nn.Module):
    def __init__(self, vocab: int = 4096, width: int = 512, layers: int = 8, heads: int = 8, kv_heads: int = 2,
                 hidden: int = 1408, max_seq: int = 256) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.blocks = nn.Sequential(*[Block(width, heads, kv_heads, hidden, max_seq) for _ in range(layers)])
        self.norm = RMSNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.blocks(self.embed(tokens))))


def llama(**kwargs) -> Llama:
    """The model remat-bench traces (keyword arguments: vocab, width, layers, heads, kv_heads, hidden,
    max_seq)."""
    return Llama(**kwargs)
