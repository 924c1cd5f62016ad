"""A ViT-style image encoder, as a user would bring one: `configs/realscale.yaml` names it
`vit:vit` (the config's folder is on the import path), and `remat-bench graphs import-torch
vit:vit --input-shape 3x224x224` traces it from this folder.

Patch embedding (a strided convolution), a class token and learned positions, pre-norm
encoder blocks (multi-head self-attention and a GELU MLP, each with a residual), and a
linear head on the class token. ``vit()`` defaults to a ViT-S/16 shape (width 384, 6
heads) with 8 blocks.
"""

from __future__ import annotations

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, width: int, heads: int, mlp: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, mlp), nn.GELU(), nn.Linear(mlp, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    def __init__(self, image: int = 224, patch: int = 16, width: int = 384, depth: int = 8, heads: int = 6,
                 classes: int = 1000) -> None:
        super().__init__()
        self.embed = nn.Conv2d(3, width, kernel_size=patch, stride=patch)
        tokens = (image // patch) ** 2
        self.cls = nn.Parameter(torch.zeros(1, 1, width))
        self.pos = nn.Parameter(torch.zeros(1, tokens + 1, width))
        self.blocks = nn.Sequential(*[Block(width, heads, 4 * width) for _ in range(depth)])
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.embed(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])


def vit(**kwargs) -> ViT:
    """The model remat-bench traces (keyword arguments: image, patch, width, depth, heads, classes)."""
    return ViT(**kwargs)
