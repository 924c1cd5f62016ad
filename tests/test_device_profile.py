"""Device profiles and the roofline estimate of operator times (remat_bench.core.device_profile,
remat_bench.torch.roofline), against values computed by hand."""

from __future__ import annotations

from tests.needs_torch import torch  # first: torch, or a failure saying how to install it

# isort: split

import json

import pytest
from click.testing import CliRunner

from remat_bench.app.cli import main
from remat_bench.app.sweep import load_config
from remat_bench.core.device_profile import (
    DeviceProfile,
    load_device_profile,
    roofline_ns,
    shipped_aliases,
    shipped_profiles,
)
from remat_bench.core.errors import ConfigError, DeviceProfileError, GraphError
from remat_bench.core.graph import Link, Transfer
from remat_bench.core.graph_io import load_graph
from remat_bench.core.provenance import cost_source, mixed_sources
from remat_bench.torch.importer import import_model
from remat_bench.torch.program import GRADIENT, build_program
from remat_bench.torch.roofline import node_bytes, node_dtype
from remat_bench.torch.spec import model_spec

# 1 TFLOP/s in float32, 4 in float16 (no bfloat16 of its own), 100 GB/s, 2 us per operator.
TOY = DeviceProfile(name="toy", peak_flops={"float32": 1e12, "float16": 4e12, "float64": 0.5e12},
                    memory_bandwidth=1e11, launch_s=2e-6, host_to_device=1e10, device_to_host=1e10, source="by hand")


def test_a_compute_bound_operator_takes_its_flops_over_the_peak():
    # 3e9 FLOPs at 1e12/s = 3 ms; its 1 MB at 1e11 B/s = 10 us: compute-bound, plus 2 us of launch.
    assert roofline_ns(3_000_000_000, 1_000_000, "float32", TOY) == 3_002_000
    assert roofline_ns(3_000_000_000, 1_000_000, "float64", TOY) == 6_002_000  # at 0.5e12/s


def test_a_memory_bound_operator_takes_its_bytes_over_the_bandwidth():
    # 1e6 FLOPs = 1 us; 5e8 bytes at 1e11 B/s = 5 ms.
    assert roofline_ns(1_000_000, 500_000_000, "float32", TOY) == 5_002_000


def test_dtypes_fall_back_in_the_stated_order_and_integers_are_memory_bound():
    assert roofline_ns(8_000_000_000, 0, "bfloat16", TOY) == 2_002_000  # no bfloat16: float16's 4e12
    assert roofline_ns(8_000_000_000, 0, "tfloat32", TOY) == 8_002_000  # no tfloat32: float32's 1e12
    assert roofline_ns(8_000_000_000, 0, "float8_e4m3fn", TOY) == 8_002_000  # an unlisted float: float32
    # Integer and boolean operators: only their bytes count, however many "FLOPs" they have.
    assert roofline_ns(10**15, 100_000_000, "int64", TOY) == 1_002_000
    assert roofline_ns(10**15, 100_000_000, "bool", TOY) == 1_002_000
    assert TOY.peak("int8") is None and TOY.peak("bfloat16") == 4e12


def test_efficiency_scales_both_rates_and_a_time_is_at_least_one_ns():
    half = DeviceProfile(**{**TOY.__dict__, "efficiency": 0.5})
    assert roofline_ns(3_000_000_000, 0, "float32", half) == 6_002_000
    assert roofline_ns(0, 500_000_000, "float32", half) == 10_002_000
    free = DeviceProfile(**{**TOY.__dict__, "launch_s": 0.0})
    assert roofline_ns(0, 0, "float32", free) == 1
    with pytest.raises(ValueError, match="must be >= 0"):
        roofline_ns(-1, 0, "float32", TOY)


def test_the_shipped_profiles_by_name_and_alias():
    assert shipped_profiles() == ["h100-sxm", "h100-pcie", "h200", "a100-sxm", "l4"]
    assert shipped_aliases() == {"h100": "h100-sxm", "h200-sxm": "h200", "a100": "a100-sxm"}
    h100 = load_device_profile("H100")
    assert h100 == load_device_profile("h100-sxm") and h100.name == "h100-sxm"
    # The data sheet's dense tensor-core figures (half its with-sparsity ones) and the non-tensor-core float32.
    assert h100.peak_flops["bfloat16"] == 989.5e12 and h100.peak_flops["float32"] == 67e12
    assert h100.memory_bandwidth == 3.35e12 and h100.host_to_device == 64e9 and h100.launch_s == 5e-6
    assert "H100" in h100.source and "data sheet" in h100.source
    a100 = load_device_profile("a100")
    assert a100.peak_flops["float16"] == 312e12 and a100.memory_bandwidth == 2.039e12
    for name in shipped_profiles():  # each has every dtype, and tensor cores no slower than float32
        p = load_device_profile(name)
        assert set(p.peak_flops) == {"float64", "float32", "tfloat32", "bfloat16", "float16", "int8"}
        assert p.peak_flops["float16"] > p.peak_flops["tfloat32"] >= p.peak_flops["float32"]
        assert p.efficiency == 1.0


def test_a_users_yaml_file(tmp_path):
    path = tmp_path / "my-gpu.yaml"
    # Exponents without a sign (67e12) are numbers too, though YAML 1.1 reads them as text.
    path.write_text("source: measured by me\npeak_flops: {float32: 20e12, float16: 80e12, float64: 1.0e+12}\n"
                    "memory_bandwidth: 900e9\nlaunch_s: 4e-6\nhost_to_device: 25e9\ndevice_to_host: 20e9\n"
                    "efficiency: 0.5\n")
    p = load_device_profile(path)
    assert p.name == "my-gpu" and p.source == "measured by me" and p.efficiency == 0.5
    assert p.peak_flops == {"float32": 20e12, "float16": 80e12, "float64": 1e12}
    assert (p.memory_bandwidth, p.launch_s, p.host_to_device, p.device_to_host) == (900e9, 4e-6, 25e9, 20e9)
    # 8e9 bfloat16 FLOPs run at float16's 80e12 * 0.5: 200 us, plus 4 us.
    assert roofline_ns(8_000_000_000, 0, "bfloat16", p) == 204_000
    same = tmp_path / "same.json"
    same.write_text(json.dumps({**p.as_dict(), "name": "json-gpu"}))
    assert load_device_profile(str(same)) == DeviceProfile(**{**p.__dict__, "name": "json-gpu"})


GOOD = {"source": "s", "peak_flops": {"float32": 1e12, "float16": 2e12, "float64": 1e11},
        "memory_bandwidth": 1e11, "launch_s": 1e-6, "host_to_device": 1e9, "device_to_host": 1e9}


@pytest.mark.parametrize(("change", "sentence"), [
    ({"memory_bandwidth": None}, "the top level is missing the required field 'memory_bandwidth'"),
    ({"peak_flops": {"float32": 1e12, "float64": 1e11}}, "field peak_flops is missing the required field 'float16'"),
    ({"peak_flops": {**GOOD["peak_flops"], "fp8": 1e15}}, "field peak_flops has an unknown field 'fp8'"),
    ({"bandwidth": 1e11}, "the top level has an unknown field 'bandwidth'"),
    ({"memory_bandwidth": 0}, "field memory_bandwidth is 0; it must be greater than 0"),
    ({"launch_s": -1e-6}, "field launch_s is -1e-06; it must be at least 0"),
    ({"efficiency": 1.5}, "field efficiency is 1.5; it must be at most 1"),
    ({"peak_flops": {**GOOD["peak_flops"], "float16": "fast"}}, "field peak_flops.float16 must be a number"),
    ({"host_to_device": float("inf")}, "field host_to_device is inf; it must be a finite number"),
])
def test_a_bad_file_is_one_sentence_naming_the_file_and_field(tmp_path, change, sentence):
    data = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data).replace("Infinity", ".inf"))  # YAML's infinity, as a user could write it
    with pytest.raises(DeviceProfileError) as caught:
        load_device_profile(str(path))
    assert str(caught.value).startswith(f"{path}: {sentence}")
    assert "\n" not in str(caught.value)


def test_bad_files_on_the_command_line_exit_2_without_a_traceback(tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("peak_flops: [1, 2\n")
    listed = tmp_path / "list.yaml"
    listed.write_text("- 1\n- 2\n")
    for arg, sentence in ((str(broken), f"{broken}: not valid YAML at line 2"),
                          (str(listed), f"{listed}: a device profile must be a mapping of fields"),
                          ("h1000", "'h1000' is neither a shipped device profile (h100-sxm (h100), h100-pcie")):
        r = CliRunner().invoke(main, ["graphs", "profiles", arg])
        assert r.exit_code == 2 and "Traceback" not in r.output, r.output
        assert r.stderr.startswith(f"error: {sentence}") and r.stderr.count("\n") == 1, r.stderr


def test_graphs_profiles_lists_the_shipped_figures():
    r = CliRunner().invoke(main, ["graphs", "profiles", "--json"])
    assert r.exit_code == 0
    rows = json.loads(r.stdout)
    assert [row["name"] for row in rows] == shipped_profiles() and rows[0]["aliases"] == ["h100"]
    assert rows[4]["peak_flops"]["float16"] == 121e12 and rows[4]["memory_bandwidth"] == 300e9  # l4
    table = " ".join(CliRunner().invoke(main, ["graphs", "profiles"], terminal_width=200).stdout.split())
    assert "h100-sxm (h100) │ 67 │ 494.5 │ 989.5 │ 989.5 │ 67 │ 1979 │ 80 GB │ 3350 │ 64/64 │ 5 µs" in table


# ---------------------------------------------------------------------- importing on a profile

BATCH = 256  # the zoo mlp: 784 -> 512 x 4 -> 10, float32


@pytest.fixture(scope="module")
def h100_mlp(tmp_path_factory):
    """The zoo mlp imported by the command line on the h100 profile (in this process: nothing is timed)."""
    from remat_bench.toolkit import child

    path = tmp_path_factory.mktemp("h100") / "mlp.json"
    mp = pytest.MonkeyPatch()
    mp.setattr(child, "can_spawn", lambda: False)  # a child takes seconds to start
    try:
        r = CliRunner().invoke(main, ["graphs", "import-torch", "mlp", "--batch", str(BATCH), "--workspace", "none",
                                      "--device-profile", "h100", "-o", str(path)])
    finally:
        mp.undo()
    assert r.exit_code == 0, r.output
    return load_graph(path), r.stdout


def test_an_import_on_h100_has_the_roofline_durations_computed_by_hand(h100_mlp):
    g, _ = h100_mlp
    nodes = {nd.id: nd for nd in g.nodes}
    assert g.units["duration"] == "ns"
    # The first linear layer, addmm(bias, x, w^T): 2 * 256 * 784 * 512 FLOPs at H100's float32 67 TFLOP/s
    # (3.07 us) beat its bytes (bias 512, x 256 x 784, w 512 x 784, out 256 x 512, 4 bytes each: 0.88 us at
    # 3.35 TB/s): compute-bound.
    flops = 2 * BATCH * 784 * 512
    moved = 4 * (512 + BATCH * 784 + 512 * 784 + BATCH * 512)
    assert flops / 67e12 > moved / 3.35e12
    assert nodes["addmm"].duration == round((5e-6 + flops / 67e12) * 1e9) == 8067
    # The ReLU after it reads and writes 256 x 512 floats: memory-bound.
    moved = 2 * 4 * BATCH * 512
    assert nodes["relu"].duration == round((5e-6 + moved / 3.35e12) * 1e9) == 5313
    assert all(nd.duration >= 5000 for nd in g.nodes)  # every operator pays the launch


def test_the_cost_record_says_the_durations_are_a_roofline(h100_mlp):
    g, printed = h100_mlp
    record = g.metadata["costs"]
    assert record["durations"] == "roofline" and record["duration_unit"] == "ns" and record["measured_on"] is None
    assert record["requested"] == {"durations": "roofline", "workspace": "none", "device_profile": "h100-sxm"}
    assert record["device_profile"] == load_device_profile("h100").as_dict()
    said = ("durations: roofline of device profile h100-sxm (NVIDIA H100 Tensor Core GPU data sheet, H100 SXM; "
            "dense tensor-core figures, half the with-sparsity ones), ns, estimated, not timed; workspaces 0")
    assert cost_source(g).describe().startswith(said)
    assert f"costs: {said}" in " ".join(printed.split())
    source = cost_source(g)
    assert not source.timed and source.label() == "roofline of device profile h100-sxm"
    # Against FLOPs-counted graphs, or another profile, overheads are not measured alike.
    other = cost_source(import_model("mlp", batch=4, depth=1, workspace="none", device_profile="l4"))
    assert mixed_sources({"a": source, "b": other}) is not None
    assert mixed_sources({"a": source, "b": source}) is None


def test_a_cost_record_without_a_profile_reads_as_before():
    record = {"durations": "flops", "duration_unit": "flops", "workspace": "none", "measured_on": None}
    graph = type("G", (), {"units": {"duration": "flops"}, "metadata": {"costs": record}})()
    assert cost_source(graph).device_profile == {}
    assert cost_source(graph).describe() == "durations counted (flops, not timed); workspaces 0 (not measured)"


def test_durations_beside_a_profile_are_refused_in_one_sentence(tmp_path):
    r = CliRunner().invoke(main, ["graphs", "import-torch", "mlp", "--durations", "flops", "--device-profile", "h100",
                                  "-o", str(tmp_path / "g.json")])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert r.stderr.startswith("error: Invalid value for --durations: a device profile gives the durations")
    assert not (tmp_path / "g.json").exists()
    with pytest.raises(GraphError, match="durations='flops' cannot be used with a device profile"):
        import_model("mlp", batch=4, durations="flops", device_profile="h100")


def conv_bf16_head() -> torch.nn.Module:
    """A float32 convolution plus a broadcast shift, then a bfloat16 linear layer."""
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
            self.shift = torch.nn.Parameter(torch.zeros(4, 1, 1))
            self.head = torch.nn.Linear(4 * 8 * 8, 5, dtype=torch.bfloat16)

        def forward(self, x):
            h = self.conv(x) + self.shift.expand(-1, 8, 8)
            return self.head(h.flatten(1).to(torch.bfloat16)).float()

    return Net()


def test_bytes_and_dtypes_read_from_the_trace():
    program = build_program(model_spec("tests.test_device_profile:conv_bf16_head", batch=2, input_shape=(3, 8, 8)))
    nodes = {nd.id: nd for nd in program.nodes}
    conv = nodes["convolution"]
    assert node_dtype(conv) == "tfloat32"  # PyTorch runs float32 convolutions in TF32 by default
    # Reads x (2x3x8x8), weight (4x3x3x3) and bias (4), writes 2x4x8x8; float32.
    assert node_bytes(conv) == 4 * (2 * 3 * 64 + 4 * 27 + 4 + 2 * 4 * 64)
    # The shift, broadcast by expand to 4x8x8 per sample, is read from its 4 floats' storage once.
    assert node_bytes(nodes["add"]) == 4 * (2 * 256 + 4 + 2 * 256)
    assert node_dtype(nodes["addmm"]) == "bfloat16"
    # The linear layer reads its bias (5), x (2x256) and w^T (a view of the 5x256 weight), writes 2x5; bfloat16.
    assert node_bytes(nodes["addmm"]) == 2 * (5 + 2 * 256 + 5 * 256 + 2 * 5)
    copies = [nd for nd in program.nodes if nd.role == GRADIENT]
    for nd in copies:  # a gradient copy reads and writes its gradient
        assert nd.fx is not None
        val = nd.fx.meta["val"]
        assert node_bytes(nd) == 2 * val.numel() * val.element_size()


def test_a_sweep_torch_entry_takes_a_device_profile(tmp_path):
    (tmp_path / "gpu.yaml").write_text(json.dumps({**GOOD, "name": "my-gpu"}))
    path = tmp_path / "sweep.yaml"
    path.write_text("graphs:\n  - torch: {model: mlp, batch: 2, device_profile: A100}\n"
                    "  - torch: {model: mlp, batch: 2, device_profile: gpu.yaml}\nmethods: [none]\nbudgets: [0.8]\n")
    cfg = load_config(path)
    assert [p.name for p in cfg.pending] == ["torch-mlp-b2-a100-sxm", "torch-mlp-b2-my-gpu"]
    assert cfg.pending[0].options["device_profile"] == load_device_profile("a100")
    assert cfg.pending[1].options["device_profile"].memory_bandwidth == 1e11
    for entry, sentence in (("{model: mlp, device_profile: nowhere.yaml}", "is neither a shipped device profile"),
                            ("{model: mlp, durations: flops, device_profile: h100}",
                             "'durations' cannot be given with 'device_profile'")):
        path.write_text(f"graphs:\n  - torch: {entry}\nmethods: [none]\nbudgets: [0.8]\n")
        with pytest.raises(ConfigError, match=sentence) as caught:
            load_config(path)
        assert "line 2" in str(caught.value)


def test_an_import_on_a_profile_records_its_host_link_in_bytes_per_ns(h100_mlp):
    g, _ = h100_mlp
    # H100 SXM's PCIe Gen5 x16: 64 GB/s each way = 64 bytes per ns; a copy's latency is the launch cost, 5 us.
    assert g.transfer == Transfer(Link(64.0, 5000.0), Link(64.0, 5000.0), "device profile h100-sxm")
