"""The ecosystem's models by name: torchvision, timm and Hugging Face transformers, with random weights.

``graphs import-torch`` reads three prefixes besides zoo names and
``package.module:factory`` paths:

- ``torchvision:NAME``: ``torchvision.models.get_model(NAME, weights=None,
  **kwargs)``, any classification, segmentation (its ``out`` logits, task
  ``segment``) or video model; the input is the default weights' crop
  (3x224x224 for most);
- ``timm:NAME``: ``timm.create_model(NAME, pretrained=False, **kwargs)``; the
  input is the model's ``input_size``, or ``in_chans`` x ``img_size`` when
  given;
- ``hf:FAMILY`` (`FAMILIES`: llama, mistral, qwen2, gpt2, bert):
  ``<Family>ForCausalLM(<Family>Config(**fields))`` (``GPT2LMHeadModel``,
  ``BertForMaskedLM``); the input is ``sequence`` token ids, the task
  ``language``.

Weights are never downloaded: torchvision gets ``weights=None`` (and
``weights_backbone=None`` where a builder takes one), timm ``pretrained=False``,
and a transformers model is built from its config (``from_pretrained`` is never
called) with ``HF_HUB_OFFLINE=1`` and ``TRANSFORMERS_OFFLINE=1`` set while
transformers is imported and the model configured and built (`offline`: the
process's environment is put back after). Keyword arguments that would load
weights (``weights``, ``pretrained``, ``checkpoint_path`` ...) are refused.

A transformers model starts from its family's standard configuration (Llama:
32 layers of width 4096; GPT-2: 12 of 768; BERT-base: 12 of 768): what users
train. ``--kwarg`` sets its fields, by a friendly name (`FRIENDLY`: ``layers``,
``width``, ``heads``, ``kv_heads``, ``ffn``, ``vocab``, ``max_positions``,
``dropout``) or by the config's own (``rms_norm_eps``, ``n_inner`` ...); a name
that is neither is refused in one sentence. ``sequence`` is the number of
tokens per sample, the default input shape; a config whose position table is
shorter gets a longer one (the default is the family's, `HFFamily.sequence`).
``attention`` picks the attention implementation, ``sdpa`` (default:
``torch.nn.functional.scaled_dot_product_attention``, which traces to one fused
CPU kernel) or ``eager`` (matrix products and a softmax); the spec records it.
The traced forward takes the input ids and returns the logits (N, T, V)
(`LanguageModelLogits`, no key-value cache), which the ``language`` task trains
with next-token cross-entropy; for BERT's masked-LM logits that is a masked-LM
loss at every position.

The libraries are the optional ``models`` extra; without one, a model that needs
it is refused in one sentence saying how to install it (exit status 2).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from types import ModuleType
from typing import Any

import torch
from torch import nn
from torch._guards import active_fake_mode
from torch._subclasses.fake_tensor import unset_fake_temporarily

from remat_bench.torch.zoo import ModelSpecError, ZooModel

EXTRA_HINT = "install it with `pip install remat-bench[models]`"
# Keyword arguments that would load pretrained weights from the network or a file.
WEIGHT_ARGUMENTS = ("weights", "weights_backbone", "pretrained", "checkpoint_path")


class EcosystemMissingError(ModelSpecError):
    """The library an ecosystem model needs (torchvision, timm or transformers) is not installed."""


def _library(name: str, model: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError:
        raise EcosystemMissingError(f"model '{model}' needs {name}, which is not installed: {EXTRA_HINT}") from None


def _split(model: str) -> tuple[str, str]:
    library, _, name = model.partition(":")
    if not name:
        raise ModelSpecError(f"'{model}' names no model after '{library}:' (e.g. {library}:{_EXAMPLES[library]})")
    return library, name


_EXAMPLES = {"torchvision": "resnet50", "timm": "vit_small_patch16_224", "hf": "llama"}


def _refuse_weights(model: str, kwargs: dict[str, Any]) -> None:
    loads = [k for k in kwargs if k in WEIGHT_ARGUMENTS]
    if loads:
        raise ModelSpecError(f"model '{model}' is built with random weights, so '{loads[0]}' is not taken "
                             "(remat-bench never downloads or loads weights; the step's graph does not depend on them)")


def entry(model: str, kwargs: dict[str, Any]) -> ZooModel:
    """The model's builder, default per-sample input shape and task, checked before anything is built.

    Parameters
    ----------
    model : str
        ``torchvision:NAME``, ``timm:NAME`` or ``hf:FAMILY``.
    kwargs : dict
        The model's arguments (``--kwarg``); the default input shape may depend on them
        (``img_size``, ``sequence``). A transformers model's attention implementation is filled in
        (``attention``), so that the spec keeps it.

    Returns
    -------
    ZooModel
        ``build(**kwargs)`` returns the module; the input shape and the task are the defaults.

    Raises
    ------
    EcosystemMissingError
        The library is not installed.
    ModelSpecError
        An unknown model or family, an argument that would load weights, or (transformers) a field its
        config does not have.
    """
    library, name = _split(model)
    _refuse_weights(model, kwargs)
    if library == "torchvision":
        return _torchvision_entry(model, name)
    if library == "timm":
        return _timm_entry(model, name, kwargs)
    return _hf_entry(model, name, kwargs)


def factory(model: str) -> Callable[..., nn.Module]:
    """``build(**kwargs)`` for ``model``: what `remat_bench.torch.zoo.load_factory` answers for it.

    Parameters
    ----------
    model : str
        ``torchvision:NAME``, ``timm:NAME`` or ``hf:FAMILY``.

    Returns
    -------
    callable
        Builds the module from keyword arguments (checked when called).

    Raises
    ------
    EcosystemMissingError
        The library is not installed.
    ModelSpecError
        An unknown model or family.
    """
    library, name = _split(model)
    if library == "torchvision":
        return _torchvision_entry(model, name).build
    if library == "timm":
        return _timm_entry(model, name, {}).build
    family = _hf_family(model, name)
    return partial(_build_hf, model, family)


# ---------------------------------------------------------------------- torchvision

# torchvision's model families that take one batch tensor and return logits; detection, keypoint,
# optical-flow and quantized models take lists of images and targets or need a backend, so they are not.
_TORCHVISION_KINDS = {"": "classify", "segmentation": "segment", "video": "classify"}


class SegmentationLogits(nn.Module):
    """A torchvision segmentation model's ``out`` logits (N, C, H, W), without its dictionary."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Per-pixel logits of a batch of images.

        Parameters
        ----------
        x : torch.Tensor
            Images (N, 3, H, W).

        Returns
        -------
        torch.Tensor
            Logits (N, C, H, W).
        """
        return self.model(x)["out"]


def _torchvision_entry(model: str, name: str) -> ZooModel:
    _library("torchvision", model)
    from torchvision import models

    kinds = {n: task for kind, task in _TORCHVISION_KINDS.items()
             for n in models.list_models(module=getattr(models, kind) if kind else models)}
    if name not in kinds:
        raise ModelSpecError(f"torchvision has no classification, segmentation or video model '{name}' "
                             "(torchvision.models.list_models() names them; detection and optical-flow models "
                             "take lists of images, not one batch)")
    try:  # the size the default weights were trained at: their transform's crop (resize, for segmentation)
        transform = models.get_model_weights(name).DEFAULT.transforms()
    except (ValueError, AttributeError):  # a model without weights
        transform = None
    size = list(getattr(transform, "crop_size", None) or getattr(transform, "resize_size", None) or [224])
    height, width = (size * 2)[:2]
    shape = (3, 16, height, width) if kinds[name] == "classify" and name in models.list_models(
        module=models.video) else (3, height, width)
    return ZooModel(model, partial(_build_torchvision, model, name), shape, kinds[name],
                    f"torchvision.models.{name}, random weights")


def _build_torchvision(model: str, name: str, **kwargs: Any) -> nn.Module:
    from torchvision import models

    _refuse_weights(model, kwargs)
    builder = models.get_model_builder(name)
    offline: dict[str, Any] = {"weights": None}
    if "weights_backbone" in inspect.signature(builder).parameters:
        offline["weights_backbone"] = None  # segmentation backbones default to ImageNet weights
    module = builder(**offline, **kwargs)
    return SegmentationLogits(module) if name in models.list_models(module=models.segmentation) else module


# ---------------------------------------------------------------------- timm


def _timm_entry(model: str, name: str, kwargs: dict[str, Any]) -> ZooModel:
    timm = _library("timm", model)
    if not timm.is_model(name):
        raise ModelSpecError(f"timm has no model '{name}' (timm.list_models() names them, e.g. "
                             "vit_small_patch16_224, resnet50, convnext_tiny)")
    pretrained = timm.models.get_pretrained_cfg(name)
    channels, height, width = pretrained.input_size if pretrained is not None else (3, 224, 224)
    size = kwargs.get("img_size")
    if size is not None:
        height, width = (size, size) if isinstance(size, int) else tuple(size)
    shape = (int(kwargs.get("in_chans", channels)), int(height), int(width))
    return ZooModel(model, partial(_build_timm, model, name), shape, "classify", f"timm {name}, random weights")


def _build_timm(model: str, name: str, **kwargs: Any) -> nn.Module:
    import timm

    _refuse_weights(model, kwargs)
    return _outside_fake(lambda: timm.create_model(name, pretrained=False, **kwargs))


def _outside_fake(build: Callable[[], nn.Module]) -> nn.Module:
    """``build()``; under a fake tensor mode, built on the meta device and given fake tensors of the mode.

    timm's constructors read tensor values (``torch.linspace(...).item()`` for the stochastic-depth
    rates), which fake tensors do not have: the module is built on the meta device outside the mode
    (no memory, no initialisation), then given empty tensors of the mode, of the same shapes.
    A real build (a replay's) is left as it is: its parameters are the model's own initial values.
    """
    if active_fake_mode() is None:
        return build()
    with unset_fake_temporarily(), torch.device("meta"):
        module = build()
    # to_empty's empty_like would read the meta tensors, which are not of the mode
    return module._apply(lambda t: torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device="cpu"))


# ---------------------------------------------------------------------- Hugging Face transformers


@dataclass(frozen=True)
class HFFamily:
    """A transformers model family: its config and model classes, its config's names for the friendly
    fields (`FRIENDLY`) and for its dropout probabilities, the default number of tokens per sample,
    whether its attention is causal and whether it learns a table of positions (GPT-2, BERT) or
    rotates by them (Llama, Mistral, Qwen2: any length)."""

    config: str
    model: str
    fields: dict[str, str]
    dropout: tuple[str, ...]
    sequence: int
    causal: bool = True
    position_table: bool = False


_DECODER = {"layers": "num_hidden_layers", "width": "hidden_size", "heads": "num_attention_heads",
            "kv_heads": "num_key_value_heads", "ffn": "intermediate_size", "vocab": "vocab_size",
            "max_positions": "max_position_embeddings"}

# The family's pretraining sequence length is the default input: Llama's 2,048, Mistral's sliding window
# of 4,096, GPT-2's 1,024, BERT's 512 (Qwen2: 4,096, as Mistral).
FAMILIES = {
    "llama": HFFamily("LlamaConfig", "LlamaForCausalLM", _DECODER, ("attention_dropout",), 2048),
    "mistral": HFFamily("MistralConfig", "MistralForCausalLM", _DECODER, ("attention_dropout",), 4096),
    "qwen2": HFFamily("Qwen2Config", "Qwen2ForCausalLM", _DECODER, ("attention_dropout",), 4096),
    "gpt2": HFFamily("GPT2Config", "GPT2LMHeadModel",
                     {"layers": "n_layer", "width": "n_embd", "heads": "n_head", "ffn": "n_inner",
                      "vocab": "vocab_size", "max_positions": "n_positions"},
                     ("resid_pdrop", "embd_pdrop", "attn_pdrop"), 1024, position_table=True),
    "bert": HFFamily("BertConfig", "BertForMaskedLM",
                     {"layers": "num_hidden_layers", "width": "hidden_size", "heads": "num_attention_heads",
                      "ffn": "intermediate_size", "vocab": "vocab_size",
                      "max_positions": "max_position_embeddings"},
                     ("hidden_dropout_prob", "attention_probs_dropout_prob"), 512, causal=False,
                     position_table=True),
}
# Friendly names -> the name every family's table uses; ``dropout`` sets all of a family's dropout fields.
FRIENDLY = {"layers": "layers", "width": "width", "hidden": "width", "heads": "heads", "kv_heads": "kv_heads",
            "ffn": "ffn", "intermediate": "ffn", "vocab": "vocab", "vocabulary": "vocab",
            "max_positions": "max_positions"}
# Not config fields: tokens per sample, and the attention implementation.
HF_OPTIONS = ("sequence", "attention", "dropout")
# The largest published decoders have about 120 layers; far above that, a graph passes a million nodes and
# building the module alone takes minutes: refused before anything is built.
MAX_LAYERS = 1024
# A model's parameters are allocated when it is built (tracing fakes only the activations): those that would
# take more than this share of the memory available are refused before the build.
PARAMETER_SHARE = 0.5
ATTENTIONS = ("sdpa", "eager")


# The switches by which transformers and huggingface_hub are told not to read the network.
OFFLINE_SWITCHES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


@contextlib.contextmanager
def offline() -> Iterator[None]:
    """`OFFLINE_SWITCHES` set to 1 for the block, and put back as they were after it (unset if they were).

    Nothing here reads the network (``from_pretrained`` is never called: a model is built from its
    config); the switches keep any code path of transformers' or huggingface_hub's from trying while
    transformers is imported (huggingface_hub reads them then) and a model is configured and built,
    without changing the environment of the rest of the process.

    Yields
    ------
    None
    """
    saved = {name: os.environ.get(name) for name in OFFLINE_SWITCHES}
    os.environ.update(dict.fromkeys(OFFLINE_SWITCHES, "1"))
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _hf_family(model: str, name: str) -> HFFamily:
    family = FAMILIES.get(name)
    if family is None:
        raise ModelSpecError(f"'{model}' is not a transformers family remat-bench builds; it builds "
                             f"{', '.join('hf:' + f for f in FAMILIES)}")
    with offline():  # huggingface_hub reads the switches when it is first imported
        _library("transformers", model)
    return family


def _hf_entry(model: str, name: str, kwargs: dict[str, Any]) -> ZooModel:
    family = _hf_family(model, name)
    kwargs.setdefault("attention", ATTENTIONS[0])  # recorded in the spec, so that a replay builds the same
    with offline():
        _hf_config(model, family, kwargs)  # a field the config does not have is refused before anything is built
    sequence = int(kwargs.get("sequence", family.sequence))
    return ZooModel(model, partial(_build_hf, model, family), (sequence,), "language",
                    f"transformers {family.model}, random weights")


def _hf_config(model: str, family: HFFamily, kwargs: dict[str, Any], building: bool = False) -> Any:
    """The family's config with ``kwargs`` set on its fields; one sentence for a name it does not have, a size
    no model has, or (``building``: the model is about to be built) parameters that do not fit here."""
    import transformers

    config_class = getattr(transformers, family.config)
    default = config_class()
    known = set(default.to_dict()) | set(getattr(config_class, "attribute_map", {}))
    fields: dict[str, Any] = {}
    for key, value in kwargs.items():
        if key in HF_OPTIONS:
            continue
        field = family.fields.get(FRIENDLY.get(key, ""), key if key in known else None)
        if field is None:
            friendly = sorted({*HF_OPTIONS, *(k for k, v in FRIENDLY.items() if v in family.fields)})
            raise ModelSpecError(f"model '{model}' has no field '{key}': give one of {', '.join(friendly)} or a "
                                 f"field of transformers' {family.config} (e.g. {family.fields['layers']})")
        if field in fields:
            raise ModelSpecError(f"model '{model}': '{key}' sets {family.config}'s {field}, which another "
                                 "argument sets too; give it once")
        fields[field] = value
    if "dropout" in kwargs:
        fields.update({f: kwargs["dropout"] for f in family.dropout})
    _check_sizes(model, family, default, fields, building)
    # Special token ids past a smaller vocabulary (GPT-2's 50256) would be warned about; no step reads them.
    vocab = fields.get("vocab_size", default.vocab_size)
    for token in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if token not in fields and isinstance(getattr(default, token, None), int) and getattr(default, token) >= vocab:
            fields[token] = None
    attention = kwargs.get("attention", "sdpa")
    if attention not in ATTENTIONS:
        raise ModelSpecError(f"model '{model}': attention must be one of {', '.join(ATTENTIONS)}, not {attention!r}")
    sequence = kwargs.get("sequence", family.sequence)
    if not isinstance(sequence, int) or isinstance(sequence, bool) or sequence < 1:
        raise ModelSpecError(f"model '{model}': sequence (tokens per sample) must be a positive integer, "
                             f"not {sequence!r}")
    positions = family.fields["max_positions"]
    if positions not in fields and getattr(default, positions) < sequence:
        fields[positions] = sequence  # a position table as long as the sequence
    config = config_class(**fields)
    config.use_cache = False
    config._attn_implementation = _attention_name(attention)
    return config


def _check_sizes(model: str, family: HFFamily, default: Any, fields: dict[str, Any], building: bool) -> None:
    """Refuse, before anything is built, sizes no model has: a layer count, width, head count, vocabulary or
    position table that is not a positive integer, or more than `MAX_LAYERS` layers; and, ``building``,
    parameters that would not fit in the memory available here (a GPT-2 of ``layers=-1`` was built with no
    blocks; one of a billion layers built until its time limit)."""
    from remat_bench.core.machine import available_memory_bytes

    friendly = {field: name for name, field in family.fields.items()}
    size: dict[str, int] = {}
    for name, field in family.fields.items():
        value = fields.get(field, getattr(default, field, None))
        if value is None and name in ("kv_heads", "ffn"):
            continue  # derived by the config (from heads, from width)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            given = next((k for k, v in FRIENDLY.items() if v == name), field) if field in fields else field
            raise ModelSpecError(f"model '{model}': {friendly.get(field, given)} must be a positive integer, not "
                                 f"{value!r}")
        size[name] = value
    if size["layers"] > MAX_LAYERS:
        raise ModelSpecError(f"model '{model}': {size['layers']:,} layers are more than the {MAX_LAYERS:,} a "
                             "model may have here (its graph would pass a million nodes); give fewer layers")
    if not building:
        return
    width, vocab = size["width"], size["vocab"]
    heads = size["heads"]
    kv_width = width * size.get("kv_heads", heads) // heads
    ffn = size.get("ffn", 4 * width)
    # Attention's four projections, the feed-forward's two or three matrices, embeddings and the head.
    per_layer = 2 * width * width + 2 * width * kv_width + 3 * width * ffn
    params = size["layers"] * per_layer + 2 * vocab * width + size["max_positions"] * width
    need = 4 * params  # float32
    available = available_memory_bytes()
    if available is not None and need > PARAMETER_SHARE * available:
        raise ModelSpecError(f"model '{model}' would hold about {need / 2**30:,.1f} GiB of parameters, more than "
                             f"{PARAMETER_SHARE:.0%} of the {available / 2**30:,.1f} GiB available here; give fewer "
                             "layers or a smaller width")


# transformers' own SDPA attention registered under a name of its own, for which transformers builds
# no mask: with no padding its SDPA path calls the kernel with is_causal and no mask anyway, but it
# first reads the position ids' values to detect packed sequences, which fake tensors do not have.
_SDPA = "remat_bench_sdpa"


def _attention_name(attention: str) -> str:
    if attention == "eager":
        return "eager"
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if _SDPA not in AttentionInterface._global_mapping:
        AttentionInterface.register(_SDPA, sdpa_attention_forward)
    return _SDPA


class LanguageModelLogits(nn.Module):
    """A transformers language model as a module of one tensor: token ids (N, T) in, logits (N, T, V) out.

    No key-value cache; every token is real. With ``mask`` (a causal model's eager attention) the
    model is given an attention mask of ones, from which transformers builds the causal mask the
    eager path adds to the scores (without one it would read the position ids' values, which fake
    tensors do not have); with SDPA no mask is built (``is_causal``), nor for BERT (no mask at all).
    ``positions`` is the length of the model's position table, if it has one: a longer input is
    refused (an id past the table would index outside it on real tensors, while fake tensors do not
    check).
    """

    def __init__(self, model: nn.Module, positions: int | None, mask: bool) -> None:
        super().__init__()
        self.model = model
        self.positions = positions
        self.mask = mask

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """The logits of every position.

        Parameters
        ----------
        ids : torch.Tensor
            Token ids (N, T), int64.

        Returns
        -------
        torch.Tensor
            Logits (N, T, V).

        Raises
        ------
        ValueError
            T longer than the position table.
        """
        if self.positions is not None and ids.shape[1] > self.positions:
            raise ValueError(f"{ids.shape[1]} tokens per sample are more than the {self.positions} positions "
                             "of its position table (--kwarg max_positions, or a shorter --kwarg sequence)")
        mask = torch.ones_like(ids, dtype=torch.bool) if self.mask else None
        logits: torch.Tensor = self.model(input_ids=ids, attention_mask=mask).logits
        return logits


def _build_hf(model: str, family: HFFamily, **kwargs: Any) -> nn.Module:
    import transformers  # imported by `_hf_family`, offline

    with offline():
        config = _hf_config(model, family, kwargs, building=True)
        module = getattr(transformers, family.model)(config)
    positions = getattr(config, family.fields["max_positions"]) if family.position_table else None
    return LanguageModelLogits(module, positions, mask=family.causal and config._attn_implementation == "eager")
