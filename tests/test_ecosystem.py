"""`remat_bench.torch.ecosystem`: torchvision, timm and transformers models by name, with random weights.

Each spelling (``torchvision:NAME``, ``timm:NAME``, ``hf:FAMILY``) imports at a small size here; the
defaults are the families' standard configurations, which these tests shrink through ``--kwarg``.
The module is skipped, saying which library is missing, only without the optional ``models`` extra
(`pip install remat-bench[models]`); `make test` installs it. No test reaches the network: every
socket connection fails while they run.
"""

from __future__ import annotations

from tests.needs_torch import torch  # first: torch, or a failure saying how to install it

# isort: split

import socket
import sys

import pytest
from click.testing import CliRunner

MISSING = "the optional models extra is not installed (pip install remat-bench[models]; make test installs it)"
torchvision = pytest.importorskip("torchvision", reason=f"torchvision missing: {MISSING}")
timm = pytest.importorskip("timm", reason=f"timm missing: {MISSING}")
transformers = pytest.importorskip("transformers", reason=f"transformers missing: {MISSING}")

from remat_bench.app.cli import main  # noqa: E402
from remat_bench.app.pipeline import run  # noqa: E402
from remat_bench.torch.ecosystem import EcosystemMissingError, factory  # noqa: E402
from remat_bench.torch.importer import import_model  # noqa: E402
from remat_bench.torch.replay import replay  # noqa: E402
from remat_bench.torch.zoo import ModelSpecError, locate_factory  # noqa: E402

# FLOPs durations and no workspaces: nothing but the trace runs.
FAST = {"durations": "flops", "workspace": "none"}
# A Llama-style decoder small enough for a CPU: 2 layers of width 64, 4 heads over 2 key-value heads.
LLAMA = {"layers": 2, "width": 64, "heads": 4, "kv_heads": 2, "ffn": 128, "vocab": 256, "sequence": 16}
# GPT-2 and BERT drop out at 0.1 by default; most tests turn it off, one replays it.
GPT2 = {"layers": 2, "width": 64, "heads": 4, "vocab": 256, "sequence": 16, "dropout": 0.0}
BERT = {**GPT2, "ffn": 128}


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Building and tracing never download: a connection attempt fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def tensor_bytes(tensors) -> int:
    """Bytes of distinct storages (tied weights once)."""
    seen = {}
    for t in tensors:
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return sum(seen.values())


def model_bytes(module: torch.nn.Module) -> tuple[int, int]:
    return tensor_bytes(module.parameters()), tensor_bytes(module.buffers())


def one_sentence(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text and exc.value.exit_code == 2, text
    return text


# ---------------------------------------------------------------------- torchvision


def test_torchvision_resnet50_is_torchvisions_model_with_random_weights():
    g = import_model("torchvision:resnet50", batch=1, input_shape=(3, 64, 64), **FAST)
    assert g.name == "torch-torchvision-resnet50-b1" and g.n > 500
    reference = torchvision.models.resnet50()
    params, buffers = model_bytes(reference)
    assert params == 4 * 25_557_032  # ResNet-50's parameter count
    batch = 4 * 3 * 64 * 64 + 8  # float32 images, one int64 label
    assert g.fixed_memory == params + buffers + batch
    spec = g.metadata["torch"]["spec"]
    assert spec["task"] == "classify" and spec["label_range"] == 1000 and spec["kwargs"] == {}


def test_torchvision_mobilenet_v3_small_takes_constructor_arguments():
    g = import_model("torchvision:mobilenet_v3_small", batch=1, input_shape=(3, 64, 64), num_classes=10,
                     dropout=0.0, **FAST)
    params, buffers = model_bytes(torchvision.models.mobilenet_v3_small(num_classes=10))
    assert g.n > 0 and g.fixed_memory == params + buffers + 4 * 3 * 64 * 64 + 8
    assert g.metadata["torch"]["spec"]["label_range"] == 10


def test_torchvision_default_input_is_the_weights_crop_and_unknown_models_are_one_sentence():
    from remat_bench.torch.ecosystem import entry

    assert entry("torchvision:resnet50", {}).input_shape == (3, 224, 224)
    assert entry("torchvision:inception_v3", {}).input_shape == (3, 299, 299)
    assert entry("torchvision:fcn_resnet50", {}).task == "segment"
    with pytest.raises(ModelSpecError) as exc:
        import_model("torchvision:resnet5000", batch=1, **FAST)
    assert "torchvision has no classification, segmentation or video model 'resnet5000'" in one_sentence(exc)
    with pytest.raises(ModelSpecError) as exc:
        import_model("torchvision:resnet50", batch=1, weights="DEFAULT", **FAST)
    assert "random weights, so 'weights' is not taken" in one_sentence(exc)


# ---------------------------------------------------------------------- timm


def test_timm_vit_small_takes_img_size_and_depth():
    g = import_model("timm:vit_small_patch16_224", batch=2, img_size=32, depth=2, **FAST)
    assert g.name == "torch-timm-vit_small_patch16_224-b2" and g.n > 0
    spec = g.metadata["torch"]["spec"]
    assert spec["input_shape"] == [3, 32, 32] and spec["task"] == "classify"  # the input follows img_size
    params, buffers = model_bytes(timm.create_model("vit_small_patch16_224", img_size=32, depth=2))
    # ViT-S: width 384, 6 heads, MLP 1536; two blocks of 1,774,464 parameters, and the patch embedding,
    # class token, 2x2 + 1 positions, final norm and 1000-class head around them.
    block = 4 * 384 + 384 * 3 * 384 + 3 * 384 + 384 * 384 + 384 + 384 * 1536 + 1536 + 1536 * 384 + 384
    around = 3 * 16 * 16 * 384 + 384 + 384 + 5 * 384 + 2 * 384 + 384 * 1000 + 1000
    assert params == 4 * (2 * block + around)
    assert g.fixed_memory == params + buffers + 2 * 4 * 3 * 32 * 32 + 2 * 8
    deeper = import_model("timm:vit_small_patch16_224", batch=2, img_size=32, depth=3, **FAST)
    assert deeper.n > g.n


def test_timm_unknown_model_is_one_sentence():
    with pytest.raises(ModelSpecError) as exc:
        import_model("timm:vit_nonesuch", batch=1, **FAST)
    assert "timm has no model 'vit_nonesuch'" in one_sentence(exc)


# ---------------------------------------------------------------------- transformers


def llama_parameters(layers: int, width: int, heads: int, kv_heads: int, ffn: int, vocab: int) -> int:
    """LlamaForCausalLM's parameters: embedding and head (untied), per layer the four projections
    (keys and values over ``kv_heads``), the gated MLP and two RMS norms, and the final norm."""
    kv = width // heads * kv_heads
    layer = 2 * width * width + 2 * width * kv + 3 * width * ffn + 2 * width
    return 2 * vocab * width + layers * layer + width


def test_hf_llama_from_its_config_fields():
    g = import_model("hf:llama", batch=2, **LLAMA, **FAST)
    assert g.name == "torch-hf-llama-b2" and g.n > 0
    spec = g.metadata["torch"]["spec"]
    assert spec["input_shape"] == [16] and spec["input_dtype"] == "int64" and spec["input_range"] == 256
    assert spec["task"] == "language" and spec["label_shape"] == [2, 16] and spec["label_range"] == 256
    assert spec["kwargs"]["attention"] == "sdpa"  # the attention implementation is recorded
    split = g.metadata["torch"]["fixed_memory"]
    assert split["parameters"] == 4 * llama_parameters(2, 64, 4, 2, 128, 256)
    ids = 2 * 16 * 8  # int64 token ids, and as many int64 next-token labels
    assert g.fixed_memory == split["parameters"] + split["buffers"] + 2 * ids
    ops = {nd.op for nd in g.nodes}
    assert "aten._scaled_dot_product_flash_attention_for_cpu.default" in ops  # one fused kernel, causal
    deeper = import_model("hf:llama", batch=2, **{**LLAMA, "layers": 3}, **FAST)
    assert deeper.n > g.n
    assert deeper.metadata["torch"]["fixed_memory"]["parameters"] == 4 * llama_parameters(3, 64, 4, 2, 128, 256)


def test_hf_llama_replays_a_schedule_with_the_outputs_of_autograd():
    g = import_model("hf:llama", batch=4, **LLAMA, **FAST)
    result = run(g, "greedy", "0.9", 20, {}, bound=False)
    assert result.status.value == "feasible" and result.schedule is not None
    measured = replay(g, result.schedule, "cpu", timing_run=False)
    assert measured.outputs_match is True
    assert measured.measured_peak == measured.simulated_peak and measured.measured_fixed == g.fixed_memory


def test_hf_gpt2_ties_its_head_to_the_embedding():
    g = import_model("hf:gpt2", batch=2, **GPT2, **FAST)
    assert g.name == "torch-hf-gpt2-b2" and g.n > 0
    # Token and position embeddings (GPT-2's 1,024 positions: sequence 16 needs no longer table), per
    # layer two layer norms, the fused QKV and output projections, the 4x MLP; a final norm; the head
    # is the token embedding.
    layer = 2 * 2 * 64 + 64 * 192 + 192 + 64 * 64 + 64 + 64 * 256 + 256 + 256 * 64 + 64
    params = 256 * 64 + 1024 * 64 + 2 * layer + 2 * 64
    split = g.metadata["torch"]["fixed_memory"]
    assert split["parameters"] == 4 * params
    assert g.fixed_memory == split["parameters"] + split["buffers"] + 2 * 2 * 16 * 8
    eager = import_model("hf:gpt2", batch=2, attention="eager", **GPT2, **FAST)
    assert eager.n > g.n  # scores, mask and softmax as operators of their own
    longer = import_model("hf:gpt2", batch=1, **{**GPT2, "sequence": 2048}, **FAST)
    assert longer.metadata["torch"]["fixed_memory"]["parameters"] == 4 * (params + 1024 * 64)  # 2,048 positions


def test_hf_gpt2_with_its_default_dropout_replays_the_same_draws():
    small = {k: v for k, v in GPT2.items() if k != "dropout"}  # GPT-2's dropout, 0.1 in three places
    g = import_model("hf:gpt2", batch=4, **small, **FAST)
    without = import_model("hf:gpt2", batch=4, **GPT2, **FAST)
    assert g.n > without.n and g.fixed_memory == without.fixed_memory  # dropout adds operators, no parameters
    result = run(g, "greedy", "0.97", 20, {}, bound=False)
    assert result.status.value == "feasible" and result.schedule is not None
    measured = replay(g, result.schedule, "cpu", timing_run=False)
    assert measured.recomputations > 0 and measured.outputs_match is True


def test_hf_bert_trains_its_masked_lm_head_at_every_position():
    g = import_model("hf:bert", batch=2, **BERT, **FAST)
    assert g.name == "torch-hf-bert-b2" and g.n > 0
    config = transformers.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                     intermediate_size=128, vocab_size=256)
    params, buffers = model_bytes(transformers.BertForMaskedLM(config))
    split = g.metadata["torch"]["fixed_memory"]
    assert split["parameters"] == params and split["buffers"] == buffers
    assert g.fixed_memory == params + buffers + 2 * 2 * 16 * 8
    assert g.metadata["torch"]["spec"]["task"] == "language"


def test_hf_mistral_and_qwen2_share_llamas_fields():
    for family in ("mistral", "qwen2"):
        g = import_model(f"hf:{family}", batch=1, **LLAMA, **FAST)
        assert g.name == f"torch-hf-{family}-b1" and g.n > 0


def test_hf_defaults_are_the_familys_standard_config():
    from remat_bench.torch.ecosystem import entry

    assert entry("hf:llama", {}).input_shape == (2048,)
    assert entry("hf:gpt2", {}).input_shape == (1024,)
    assert entry("hf:bert", {"sequence": 128}).input_shape == (128,)
    module = factory("hf:gpt2")(layers=1)
    config = module.model.config
    assert (config.n_embd, config.n_head, config.vocab_size, config.n_positions) == (768, 12, 50257, 1024)
    assert config.resid_pdrop == 0.1  # GPT-2 drops out unless told not to


def test_hf_errors_are_one_sentence():
    with pytest.raises(ModelSpecError) as exc:
        import_model("hf:llama", batch=1, colour="blue", **LLAMA, **FAST)
    text = one_sentence(exc)
    assert "model 'hf:llama' has no field 'colour'" in text and "kv_heads" in text
    with pytest.raises(ModelSpecError) as exc:
        import_model("hf:gpt2", batch=1, kv_heads=2, **GPT2, **FAST)
    assert "has no field 'kv_heads'" in one_sentence(exc)
    with pytest.raises(ModelSpecError) as exc:
        import_model("hf:t5", batch=1, **FAST)
    assert "'hf:t5' is not a transformers family remat-bench builds" in one_sentence(exc)
    with pytest.raises(ModelSpecError) as exc:
        import_model("hf:llama", batch=1, attention="flash", **LLAMA, **FAST)
    assert "attention must be one of sdpa, eager" in one_sentence(exc)
    with pytest.raises(ModelSpecError) as exc:
        import_model("hf:llama", batch=1, **{**LLAMA, "num_hidden_layers": 3}, **FAST)
    assert "give it once" in one_sentence(exc)
    with pytest.raises(ModelSpecError) as exc:
        import_model("hf:gpt2", batch=1, max_positions=8, **GPT2, **FAST)
    assert "16 tokens per sample are more than the 8 positions" in one_sentence(exc)


@pytest.mark.parametrize("kwargs, message", [
    ({"layers": -1}, "layers must be a positive integer, not -1"),
    ({"layers": 0}, "layers must be a positive integer, not 0"),
    ({"width": True}, "width must be a positive integer, not True"),
    ({"heads": 2.5}, "heads must be a positive integer, not 2.5"),
    ({"vocab": "many"}, "vocab must be a positive integer, not 'many'"),
    ({"n_positions": -8}, "max_positions must be a positive integer, not -8"),
    ({"layers": 10**9}, "1,000,000,000 layers are more than the 1,024 a model may have here (its graph would pass "
                        "a million nodes); give fewer layers"),
])
def test_hf_sizes_no_model_has_are_refused_before_anything_is_built(kwargs, message):
    # A GPT-2 of layers=-1 was imported with no blocks (exit 0); one of a billion layers built until its limit.
    from remat_bench.torch.ecosystem import entry

    with pytest.raises(ModelSpecError) as exc:
        entry("hf:gpt2", dict(kwargs))
    assert one_sentence(exc) == f"model 'hf:gpt2': {message}"


def test_hf_parameters_beyond_the_memory_here_are_refused_before_the_build(monkeypatch):
    from remat_bench.core import machine

    monkeypatch.setattr(machine, "available_memory_bytes", lambda: 2**30)
    with pytest.raises(ModelSpecError) as exc:
        factory("hf:gpt2")(layers=12)  # GPT-2 small: 124 million parameters (counted high: 0.7 GiB)
    assert one_sentence(exc) == ("model 'hf:gpt2' would hold about 0.7 GiB of parameters, more than 50% of the 1.0 "
                                 "GiB available here; give fewer layers or a smaller width")
    assert factory("hf:gpt2")(layers=1, width=64, heads=2, vocab=128).model.config.n_layer == 1


# ---------------------------------------------------------------------- the name, the library, the command


def test_a_missing_library_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "timm", None)  # import timm raises ImportError
    with pytest.raises(EcosystemMissingError) as exc:
        import_model("timm:resnet18", batch=1, **FAST)
    assert one_sentence(exc) == ("model 'timm:resnet18' needs timm, which is not installed: install it with "
                                 "`pip install remat-bench[models]`")


def test_ecosystem_names_are_not_factory_paths():
    for model in ("torchvision:resnet50", "timm:vit_small_patch16_224", "hf:llama"):
        assert locate_factory(model) is None  # a sweep config takes them as it takes zoo names


def test_cli_imports_an_ecosystem_model_and_lists_the_spellings(tmp_path):
    out = tmp_path / "llama.json"
    args = [f"--kwarg={k}={v}" for k, v in LLAMA.items()]
    r = CliRunner().invoke(main, ["graphs", "import-torch", "hf:llama", "--batch", "2", *args, "--durations", "flops",
                                  "--workspace", "none", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "torch-hf-llama-b2" in r.output
    r = CliRunner().invoke(main, ["graphs", "import-torch", "--help"])
    for spelling in ("torchvision:resnet50", "timm:vit_small_patch16_224", "hf:llama", "hf:gpt2", "hf:bert"):
        assert spelling in r.output
