"""The model zoo for ``remat-bench graphs import-torch``: ten training tasks, six defined here.

Each entry is a plain `torch.nn.Module` (no torchvision) with a default input
shape and a task that fixes the loss and the labels:

| name | architecture | default input (per sample) | task |
| --- | --- | --- | --- |
| ``mlp`` | 784 -> 512 x 4 -> 10, ReLU | (784,) | classify |
| ``vgg11`` | VGG-11 (Simonyan and Zisserman 2015, config A) with batchnorm, CIFAR head | (3, 32, 32) | classify |
| ``resnet18`` | ResNet-18 (He et al. 2016), basic blocks [2, 2, 2, 2], ImageNet stem | (3, 224, 224) | classify |
| ``resnet50`` | ResNet-50, bottleneck blocks [3, 4, 6, 3] | (3, 224, 224) | classify |
| ``unet`` | U-Net (Ronneberger et al. 2015), depth 3, base width 32, batchnorm | (3, 128, 128) | segment |
| ``gpt`` | GPT-style decoder: token, position embeddings; pre-norm causal attention, GELU MLP | (128,) ids | language |
| ``gru`` | 2-layer GRU of ``nn.GRUCell`` unrolled over 32 steps, hidden 256 | (32, 64) | classify |
| ``dunet`` | diffusion U-Net: GroupNorm, SiLU, attention at two resolutions, cat skips | (3, 32, 32) | regress |
| ``moe`` | mixture-of-experts decoder, top-2 of 4 experts, dense dispatch | (128,) ids | language |
| ``convnext`` | ConvNeXt-style: patchify stem, depthwise 7x7, channels-last LayerNorm | (3, 64, 64) | classify |

The last four are the families the project was never tuned on, defined in
`remat_bench.torch.families` (which says what makes each hard).

Keyword arguments scale the models (``width`` for the convolutional ones,
``hidden``/``depth`` for the MLP, ``layers``/``width``/``heads``/``vocab`` for
the GPT; the families' in their module), so that tests and benchmarks can pick
sizes where activations, not parameters, dominate memory at batch sizes a CPU
can run.

Tasks (the loss is part of the traced training step):

- ``classify``: logits (N, C), integer labels (N,), cross-entropy;
- ``segment``: logits (N, C, H, W), integer labels (N, H, W), cross-entropy;
- ``language``: token ids (N, T) in, logits (N, T, V) out, next-token labels
  (N, T), cross-entropy over all N * T positions;
- ``regress``: any output, a target of the output's shape, mean squared error
  (the default for a user's own model whose output is not (N, C)).

No model uses dropout, so their shipped graphs stay as they were; a model
with dropout imports and replays exactly all the same (random operators are
seeded one by one: `remat_bench.torch.randomness`).
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from remat_bench.core.errors import RematBenchError
from remat_bench.torch import quiet_torch_logs
from remat_bench.torch.families import CausalSelfAttention, ConvNeXt, DiffusionUNet, MoEDecoder, UnrolledGRU

quiet_torch_logs()

TASKS = ("classify", "segment", "language", "regress")


# ---------------------------------------------------------------------- models


class MLP(nn.Module):
    """``depth`` hidden layers of ``hidden`` units with ReLU, then a linear classifier."""

    def __init__(self, in_features: int = 784, hidden: int = 512, depth: int = 4, num_classes: int = 10) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = in_features
        for _ in range(depth):
            layers += [nn.Linear(width, hidden), nn.ReLU()]
            width = hidden
        layers.append(nn.Linear(width, num_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits of a batch, each sample flattened.

        Parameters
        ----------
        x : torch.Tensor
            A batch (N, ...) of ``in_features`` values per sample.

        Returns
        -------
        torch.Tensor
            Logits (N, num_classes).
        """
        return self.net(x.flatten(1))


def _conv_bn_relu(c_in: int, c_out: int) -> list[nn.Module]:
    return [nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU()]


class VGG11(nn.Module):
    """VGG-11 (config A) with batchnorm; global average pooling and one linear layer as head."""

    CONFIG = (1, "M", 2, "M", 4, 4, "M", 8, 8, "M", 8, 8, "M")  # in units of width

    def __init__(self, width: int = 64, num_classes: int = 10) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c_in = 3
        for item in self.CONFIG:
            if item == "M":
                layers.append(nn.MaxPool2d(2))
            else:
                layers += _conv_bn_relu(c_in, width * int(item))
                c_in = width * int(item)
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(c_in, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits of a batch of images.

        Parameters
        ----------
        x : torch.Tensor
            Images (N, 3, H, W), H and W at least 32 (five 2x2 max poolings).

        Returns
        -------
        torch.Tensor
            Logits (N, num_classes).
        """
        h = self.features(x)
        return self.head(torch.flatten(F.adaptive_avg_pool2d(h, 1), 1))


class _ResidualBlock(nn.Module):
    """A residual block of He et al. 2016: its convolutions (`branch`) plus the shortcut, then ReLU."""

    expansion = 1
    shortcut: nn.Module

    def branch(self, x: torch.Tensor) -> torch.Tensor:
        """The convolutions, without the shortcut (each block has its own)."""
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The block's convolutions plus the shortcut, then ReLU.

        Parameters
        ----------
        x : torch.Tensor
            Feature maps (N, c_in, H, W).

        Returns
        -------
        torch.Tensor
            Feature maps (N, expansion c_mid, H / stride, W / stride).
        """
        return F.relu(self.branch(x) + self.shortcut(x))


class BasicBlock(_ResidualBlock):
    """Two 3x3 convolutions (ResNet-18 and -34)."""

    expansion = 1

    def __init__(self, c_in: int, c_mid: int, stride: int) -> None:
        super().__init__()
        c_out = c_mid * self.expansion
        self.conv1 = nn.Conv2d(c_in, c_mid, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_mid)
        self.conv2 = nn.Conv2d(c_mid, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut = _shortcut(c_in, c_out, stride)

    def branch(self, x: torch.Tensor) -> torch.Tensor:
        """Two 3x3 convolutions, the first followed by ReLU.

        Parameters
        ----------
        x : torch.Tensor
            Feature maps (N, c_in, H, W).

        Returns
        -------
        torch.Tensor
            The branch's output, before the shortcut is added."""
        h = F.relu(self.bn1(self.conv1(x)))
        return self.bn2(self.conv2(h))


class Bottleneck(_ResidualBlock):
    """1x1, 3x3 and 1x1 convolutions, the last widening by 4 (ResNet-50 and deeper)."""

    expansion = 4

    def __init__(self, c_in: int, c_mid: int, stride: int) -> None:
        super().__init__()
        c_out = c_mid * self.expansion
        self.conv1 = nn.Conv2d(c_in, c_mid, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_mid)
        self.conv2 = nn.Conv2d(c_mid, c_mid, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_mid)
        self.conv3 = nn.Conv2d(c_mid, c_out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(c_out)
        self.shortcut = _shortcut(c_in, c_out, stride)

    def branch(self, x: torch.Tensor) -> torch.Tensor:
        """1x1, 3x3 and 1x1 convolutions, the first two followed by ReLU.

        Parameters
        ----------
        x : torch.Tensor
            Feature maps (N, c_in, H, W).

        Returns
        -------
        torch.Tensor
            The branch's output, before the shortcut is added."""
        h = F.relu(self.bn1(self.conv1(x)))
        h = F.relu(self.bn2(self.conv2(h)))
        return self.bn3(self.conv3(h))


def _shortcut(c_in: int, c_out: int, stride: int) -> nn.Module:
    if stride == 1 and c_in == c_out:
        return nn.Identity()
    return nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))


class ResNet(nn.Module):
    """He et al. 2016: a 7x7 stride-2 stem, max pooling, four stages, global pooling, linear head."""

    def __init__(self, block: type[BasicBlock] | type[Bottleneck], blocks: tuple[int, ...],
                 width: int = 64, num_classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        stages: list[nn.Module] = []
        c_in = width
        for i, count in enumerate(blocks):
            c_mid = width * 2**i
            for j in range(count):
                stages.append(block(c_in, c_mid, 2 if (j == 0 and i > 0) else 1))
                c_in = c_mid * block.expansion
        self.stages = nn.Sequential(*stages)
        self.head = nn.Linear(c_in, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits of a batch of images.

        Parameters
        ----------
        x : torch.Tensor
            Images (N, 3, H, W).

        Returns
        -------
        torch.Tensor
            Logits (N, num_classes).
        """
        h = self.stages(self.stem(x))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(h, 1), 1))


def resnet18(width: int = 64, num_classes: int = 10) -> ResNet:
    """ResNet-18: basic blocks, [2, 2, 2, 2] per stage.

    Parameters
    ----------
    width : int
        Channels of the stem and the first stage, doubled at each later stage.
    num_classes : int
        Outputs of the head.

    Returns
    -------
    ResNet
    """
    return ResNet(BasicBlock, (2, 2, 2, 2), width, num_classes)


def resnet50(width: int = 64, num_classes: int = 10) -> ResNet:
    """ResNet-50: bottleneck blocks, [3, 4, 6, 3] per stage.

    Parameters
    ----------
    width : int
        Channels of the stem and of the first stage's bottlenecks, doubled at each later stage.
    num_classes : int
        Outputs of the head.

    Returns
    -------
    ResNet
    """
    return ResNet(Bottleneck, (3, 4, 6, 3), width, num_classes)


class UNet(nn.Module):
    """Ronneberger et al. 2015: ``depth`` down steps (two 3x3 conv-bn-relu, max pool), mirrored up
    steps (2x2 transposed convolution, concatenation with the skip, two 3x3 conv-bn-relu)."""

    def __init__(self, width: int = 32, depth: int = 3, num_classes: int = 4) -> None:
        super().__init__()
        self.down = nn.ModuleList()
        self.up = nn.ModuleList()
        self.merge = nn.ModuleList()
        c_in = 3
        for i in range(depth):
            c = width * 2**i
            self.down.append(nn.Sequential(*_conv_bn_relu(c_in, c), *_conv_bn_relu(c, c)))
            c_in = c
        c_bottom = width * 2**depth
        self.bottom = nn.Sequential(*_conv_bn_relu(c_in, c_bottom), *_conv_bn_relu(c_bottom, c_bottom))
        c_in = c_bottom
        for i in reversed(range(depth)):
            c = width * 2**i
            self.up.append(nn.ConvTranspose2d(c_in, c, 2, stride=2))
            self.merge.append(nn.Sequential(*_conv_bn_relu(2 * c, c), *_conv_bn_relu(c, c)))
            c_in = c
        self.head = nn.Conv2d(c_in, num_classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Per-pixel logits of a batch of images.

        Parameters
        ----------
        x : torch.Tensor
            Images (N, 3, H, W), H and W divisible by ``2 ** depth``.

        Returns
        -------
        torch.Tensor
            Logits (N, num_classes, H, W).
        """
        skips = []
        h = x
        for block in self.down:
            h = block(h)
            skips.append(h)
            h = F.max_pool2d(h, 2)
        h = self.bottom(h)
        for up, merge, skip in zip(self.up, self.merge, reversed(skips)):
            h = merge(torch.cat([up(h), skip], dim=1))
        return self.head(h)


class GPTBlock(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Attention then MLP, each pre-normed and added to its input.

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
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """A GPT-style decoder (Radford et al. 2019): ``layers`` pre-norm blocks, untied output head."""

    def __init__(self, vocab: int = 1024, max_seq: int = 1024, width: int = 256, layers: int = 4,
                 heads: int = 4) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(max_seq, width)
        self.blocks = nn.Sequential(*(GPTBlock(width, heads) for _ in range(layers)))
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


# ---------------------------------------------------------------------- registry


@dataclass(frozen=True)
class ZooModel:
    """A zoo entry: how to build the module, its default per-sample input shape, and its task."""

    name: str
    build: Callable[..., nn.Module]
    input_shape: tuple[int, ...]
    task: str
    description: str


ZOO: dict[str, ZooModel] = {
    m.name: m
    for m in (
        ZooModel("mlp", MLP, (784,), "classify", "784 -> 512 x 4 -> 10 MLP with ReLU"),
        ZooModel("vgg11", VGG11, (3, 32, 32), "classify", "VGG-11 with batchnorm, CIFAR-sized head"),
        ZooModel("resnet18", resnet18, (3, 224, 224), "classify", "ResNet-18, basic blocks [2, 2, 2, 2]"),
        ZooModel("resnet50", resnet50, (3, 224, 224), "classify", "ResNet-50, bottleneck blocks [3, 4, 6, 3]"),
        ZooModel("unet", UNet, (3, 128, 128), "segment", "U-Net, depth 3, base width 32, batchnorm"),
        ZooModel("gpt", GPT, (128,), "language", "GPT-style decoder, 4 blocks of width 256, 4 heads"),
        # Families the project was never tuned on (issue 46).
        ZooModel("gru", UnrolledGRU, (32, 64), "classify",
                 "2-layer GRU of GRUCells unrolled over 32 steps, hidden 256"),
        ZooModel("dunet", DiffusionUNet, (3, 32, 32), "regress",
                 "diffusion U-Net, GroupNorm and SiLU, attention at 16x16 and 8x8, concatenated skips"),
        ZooModel("moe", MoEDecoder, (128,), "language",
                 "mixture-of-experts decoder, 4 blocks of width 256, top-2 of 4 experts, dense dispatch"),
        ZooModel("convnext", ConvNeXt, (3, 64, 64), "classify",
                 "ConvNeXt-style CNN, depthwise 7x7, channels-last LayerNorm, stages [2, 2, 4, 2]"),
    )
}


class ModelSpecError(RematBenchError):
    """A model name, factory or input shape that cannot be used."""


# Where a factory's module lives decides whether it may be called (`locate_factory`).
USER, INSTALLED, STANDARD = "your own code", "an installed package", "the standard library"
# Said wherever a factory is refused: what may be called, and where the rule is written down.
FACTORY_RULE = ("a model is a zoo name ({zoo}), an nn.Module subclass, or a function in a file of your own "
                "(docs/sweeps.md, 'PyTorch models')")


@dataclass(frozen=True)
class FactoryPlace:
    """Where ``module:attr`` would be imported from, found without importing it."""

    module: str
    attr: str
    origin: str | None
    kind: str  # USER, INSTALLED or STANDARD


# The ecosystem's models (`remat_bench.torch.ecosystem`), built by their libraries with random weights.
ECOSYSTEM_PREFIXES = ("torchvision:", "timm:", "hf:")


def ecosystem_name(model: str) -> bool:
    """Whether ``model`` is ``torchvision:NAME``, ``timm:NAME`` or ``hf:FAMILY`` (`remat_bench.torch.ecosystem`),
    which is never read as ``package.module:factory``.

    Parameters
    ----------
    model : str
        A model name.

    Returns
    -------
    bool
    """
    return model.startswith(ECOSYSTEM_PREFIXES)


def _rule() -> str:
    return FACTORY_RULE.format(zoo=", ".join(ZOO))


def _roots() -> tuple[list[str], list[str]]:
    """Folders of installed packages (site-packages, and this package itself) and of the standard library."""
    import site
    import sysconfig

    paths = sysconfig.get_paths()
    installed = [*site.getsitepackages(), site.getusersitepackages(), paths["purelib"], paths["platlib"],
                 *(p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages")),
                 os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]  # remat_bench/
    standard = [paths["stdlib"], paths["platstdlib"],
                sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_prefix})["stdlib"]]
    return ([os.path.realpath(p) for p in installed if p], [os.path.realpath(p) for p in standard if p])


def place_of(filename: str | None) -> str:
    """Whose code a file is: USER, INSTALLED (site-packages, remat-bench) or STANDARD (no file: built in).

    Parameters
    ----------
    filename : str or None
        A module's or a function's file; None or a relative name for built-in, frozen or generated code.

    Returns
    -------
    str
        `USER`, `INSTALLED` or `STANDARD`.
    """
    if not filename or not os.path.isabs(filename):
        return STANDARD  # built-in, frozen or generated code
    path = os.path.realpath(filename)
    installed, standard = _roots()
    # Installed first: a virtual environment's site-packages lies inside its standard library folder.
    if any(path.startswith(root + os.sep) for root in installed):
        return INSTALLED
    if any(path.startswith(root + os.sep) for root in standard):
        return STANDARD
    return USER


def locate_factory(model: str, search: Sequence[str] = ()) -> FactoryPlace | None:
    """Where ``package.module:factory`` would come from, found without importing or running anything.

    None for a zoo name. ``search`` folders come first (a sweep config's folder), then the current
    folder, then the Python path, as `load_factory` imports. Raises `ModelSpecError` for a name that is
    not ``module:attr``, a module that cannot be found, and any module of the standard library
    (``os:system``, ``subprocess:run``, ``builtins:eval``): nothing there builds a model.

    Parameters
    ----------
    model : str
        A zoo name or ``package.module:factory``.
    search : Sequence of str
        Folders looked in first.

    Returns
    -------
    FactoryPlace or None
        The module, the attribute, the module's file and whose code it is; None for a zoo name.

    Raises
    ------
    ModelSpecError
        A malformed name, a module not found, or a module of the standard library.
    """
    if model in ZOO or ecosystem_name(model):
        return None
    module_name, sep, attr = model.partition(":")
    if not sep or not module_name or not attr:
        raise ModelSpecError(
            f"'{model}' is neither a zoo model ({', '.join(ZOO)}), an ecosystem model (torchvision:NAME, "
            "timm:NAME, hf:FAMILY) nor a factory written as package.module:factory"
        )
    parts = module_name.split(".")
    if not all(part.isidentifier() for part in (*parts, *attr.split("."))):
        raise ModelSpecError(f"'{model}' is not of the form package.module:factory (Python names separated by dots)")
    if parts[0] in sys.stdlib_module_names or parts[0] in sys.builtin_module_names:
        raise ModelSpecError(f"'{model}' names the standard library ({parts[0]}), which is never called; {_rule()}")
    loaded = sys.modules.get(module_name)
    if loaded is not None:
        origin = getattr(loaded, "__file__", None)
    else:
        origin = _find_module(parts, [*search, os.getcwd(), *sys.path])
        if origin is None:
            raise ModelSpecError(f"'{model}': cannot find module '{module_name}' (looked "
                                 f"{'beside the config, ' if search else ''}in the current folder and on the "
                                 "Python path)")
    kind = place_of(origin)
    if kind == STANDARD:
        raise ModelSpecError(f"'{model}' names the standard library ({module_name}), which is never called; "
                             f"{_rule()}")
    return FactoryPlace(module_name, attr, origin, kind)


def _find_module(parts: list[str], path: list[str]) -> str | None:
    """The file of module ``parts`` (its package's ``__init__.py``), found by the path finder alone.

    ``importlib.util.find_spec`` would import every parent package to read its ``__path__``; the path
    finder is given each package's folders instead, so nothing runs.
    """
    from importlib.machinery import PathFinder

    locations: list[str] | None = [p for p in path if isinstance(p, str)]
    spec = None
    for i in range(len(parts)):
        spec = PathFinder.find_spec(".".join(parts[: i + 1]), locations)
        if spec is None:
            return None
        locations = list(spec.submodule_search_locations or [])
        if i < len(parts) - 1 and not locations:
            return None  # a module, not a package: it has no submodules
    assert spec is not None
    origin = spec.origin if spec.has_location else None
    if origin is None and spec.submodule_search_locations:  # a namespace package: its first folder
        origin = os.path.join(next(iter(spec.submodule_search_locations)), "__init__.py")
    return origin


def load_factory(model: str) -> Callable[..., nn.Module]:
    """The callable behind a zoo name or a ``package.module:factory`` path, checked before it is called.

    A factory is called only when it is an ``nn.Module`` subclass, or a Python function in a file of
    the user's own (outside the standard library and installed packages, `place_of`); a module of the
    standard library is refused before it is imported (`locate_factory`). Importing the module runs its
    top-level code: a ``torch:`` entry or ``import-torch`` runs the code it names.

    Parameters
    ----------
    model : str
        A zoo name or ``package.module:factory`` (the factory may be a dotted path inside the module).

    Returns
    -------
    callable
        The zoo entry's builder, the ``nn.Module`` subclass, or the user's function; not yet called.

    Raises
    ------
    ModelSpecError
        A name `locate_factory` refuses, a module that cannot be imported, a missing attribute, or a
        callable that may not be called.
    """
    if model in ZOO:
        return ZOO[model].build
    if ecosystem_name(model):
        # Resolved by `remat_bench.torch.ecosystem`, which builds on this module (its errors, ZooModel):
        # `remat_bench.torch.build.model_factory` asks it first, so this module never imports it.
        raise ModelSpecError(f"'{model}' is an ecosystem model: build it with remat_bench.torch.ecosystem.factory")
    # Like `python -m`, look in the current folder first, so `mypkg.models:make` works from a checkout.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    place = locate_factory(model)
    assert place is not None
    try:
        module = importlib.import_module(place.module)
    except ImportError as exc:
        raise ModelSpecError(f"'{model}': cannot import module '{place.module}' ({exc})") from None
    factory: Any = module
    for part in place.attr.split("."):
        factory = getattr(factory, part, None)
        if factory is None:
            raise ModelSpecError(f"'{model}': module '{place.module}' has no attribute '{place.attr}'")
    if isinstance(factory, type) and issubclass(factory, nn.Module):
        return factory
    if inspect.isfunction(factory):
        kind = place_of(factory.__code__.co_filename)
        if kind == USER:
            return factory
        what = f"a function of {kind} ({factory.__module__})"
    elif isinstance(factory, type):
        what = f"a class that is not an nn.Module ({factory.__name__})"
    elif callable(factory):
        what = f"a {type(factory).__name__}, not a function of your own"
    else:
        raise ModelSpecError(f"'{model}': '{place.attr}' is not callable")
    raise ModelSpecError(f"'{model}' is {what}, so it is not called; {_rule()}")


class TrainingStep(nn.Module):
    """The model and its loss: ``forward(inputs, labels)`` returns the scalar training loss."""

    def __init__(self, model: nn.Module, task: str) -> None:
        super().__init__()
        self.model = model
        self.task = task

    def forward(self, inputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The loss of the task on one batch.

        Parameters
        ----------
        inputs : torch.Tensor
            The batch the model reads.
        labels : torch.Tensor
            Class indices (classify, segment, language: next tokens) or targets of the output's shape
            (regress).

        Returns
        -------
        torch.Tensor
            The scalar loss: cross-entropy, or mean squared error for ``regress``.
        """
        out = self.model(inputs)
        if self.task == "language":
            return F.cross_entropy(out.flatten(0, 1), labels.flatten())
        if self.task in ("classify", "segment"):
            return F.cross_entropy(out, labels)
        return F.mse_loss(out, labels)
