"""`make gpu-check`: the one prepared check a session with a GPU runs (docs/pytorch.md, "Checking on a GPU").

``python -m benchmarks.gpu_check [--device cuda|cpu] [--out DIR] [--small] [--time-budget S]
[--methods NAMES]`` imports two models, solves them at two budgets with a few
fast methods, replays every plan found with real tensors and trains a few
steps with it, and writes what the simulator predicted beside what was
measured to ``DIR/gpu-check.json`` and ``DIR/gpu-check.md`` (default
``results/gpu-check/``), rewritten after each model so that a run stopped
early keeps what it measured.

The models, at sizes chosen for steps of tens to a hundred-odd milliseconds on an H200 in float32:

- ResNet-50 (torchvision's when it imports, else the zoo's, the same
  bottleneck blocks [3, 4, 6, 3] with 1,000 classes), batch 32 at 224x224;
- a Llama-style decoder, 8 layers of width 1024 (16 heads, 4 key-value heads,
  feed-forward 2816), vocabulary 32,000, 1,024 tokens, batch 8: transformers'
  ``hf:llama`` when transformers imports, else `llama_decoder` below (the zoo's
  ``gpt`` traces its attention to a CPU-only kernel, which CUDA cannot run).
  Attention is traced written out (``attention="eager"``) for the same reason.

Each model is imported twice: with its costs measured on the device
(durations timed, workspaces measured), and with the roofline durations of
the device profile matching the GPU's name (`profile_for`; nothing timed).
Both graphs have the same nodes, so each schedule is simulated on both: the
calibrated prediction and the profile's, beside the measured overhead.

Per model, one plan that moves values is replayed too: the baseline with
every forward value the backward reads sent to the host between the passes
(`remat_bench.torch.moves.save_on_cpu_plan`), over the graph's host link
(measured with pinned copies on CUDA; on the CPU stand-in the roofline
profile's data-sheet link): its copies on two side streams, its measured
device peak against the simulated one, its gradients against autograd's,
its host peaks and its measured overhead against the modelled one.

Per model, method and budget the outputs hold the simulated peak, the
measured peak (allocated, on the simulator's footing) and the CUDA caching
allocator's reserved peak, the modelled overheads (calibrated and roofline),
the measured overhead (median of paired runs against the baseline, with its
95% interval), the errors in points, and the training run's peak and step
times; per model, the baseline's step duration as calibrated, as the roofline
estimates it and as measured. Every number comes from the simulator or from a
measurement.

``--device cpu`` (or no GPU) runs the same code on the CPU with small models
(``--small``, implied there): the CUDA-only figures are left empty and the
report says so (no reserved memory: the CPU allocator has no cache; times are
read off the replay's CPU clock instead of CUDA events). CI runs it
(tests/test_gpu_check.py).

A wall-clock budget (``--time-budget``, 420 s) is shared between the models;
what would not fit in a model's share is skipped and listed, not run over.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import gc
import importlib
import json
import math
import platform
import re
import signal
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from remat_bench.app.pipeline import run
from remat_bench.core.baseline import baseline, baseline_schedule
from remat_bench.core.errors import MethodError, RematBenchError
from remat_bench.core.files import atomic_write_text
from remat_bench.core.graph import Graph
from remat_bench.core.simulate import simulate
from remat_bench.methods import BUILTIN, get_method
from remat_bench.torch import replay as replay_module
from remat_bench.torch import train as train_module
from remat_bench.torch.importer import import_model, program_for_graph
from remat_bench.torch.moves import save_on_cpu_plan
from remat_bench.torch.program import Program
from remat_bench.torch.replay import replay
from remat_bench.torch.train import train

BUDGETS = ("0.7", "0.5")
FAST_METHODS = ("knapsack", "dtr", "greedy", "chen")
TIME_LIMIT_S = {"auto": 20.0}  # a method's time limit; the fast ones end in seconds
FAST_TIME_LIMIT_S = 10.0
PAIRS = 6  # timed pairs per replay: the fewest that give a 95% interval of the median
TRAIN_STEPS = 6  # 4 timed: the first two are left out (warm-up, and the profiled one)
SMALL_TRAIN_STEPS = 3
DEFAULT_TIME_BUDGET_S = 420.0
DEFAULT_OUT = Path("results/gpu-check")
JSON_NAME, MARKDOWN_NAME = "gpu-check.json", "gpu-check.md"
WRITE_RESERVE_S = 5.0  # kept for writing the outputs
LLAMA_FACTORY = "benchmarks.gpu_check:llama_decoder"


# ---------------------------------------------------------------------- the fallback decoder


class _RMSNorm(nn.Module):
    def __init__(self, width: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


def _rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


class _DecoderBlock(nn.Module):
    """Pre-norm grouped-query causal attention with rotary positions, then a SwiGLU feed-forward (Llama's)."""

    def __init__(self, width: int, heads: int, kv_heads: int, ffn: int) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head = heads, kv_heads, width // heads
        self.norm1, self.norm2 = _RMSNorm(width), _RMSNorm(width)
        self.q = nn.Linear(width, width, bias=False)
        self.k = nn.Linear(width, kv_heads * self.head, bias=False)
        self.v = nn.Linear(width, kv_heads * self.head, bias=False)
        self.o = nn.Linear(width, width, bias=False)
        self.gate, self.up = nn.Linear(width, ffn, bias=False), nn.Linear(width, ffn, bias=False)
        self.down = nn.Linear(ffn, width, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        n, t, c = x.shape
        h = self.norm1(x)
        q = _rotary(self.q(h).view(n, t, self.heads, self.head).transpose(1, 2), cos, sin)
        k = _rotary(self.k(h).view(n, t, self.kv_heads, self.head).transpose(1, 2), cos, sin)
        v = self.v(h).view(n, t, self.kv_heads, self.head).transpose(1, 2)
        k = k.repeat_interleave(self.heads // self.kv_heads, dim=1)
        v = v.repeat_interleave(self.heads // self.kv_heads, dim=1)
        # Written out, as transformers' eager attention is: CUDA cannot run the CPU's fused kernel it traces to.
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head)
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        att = scores.masked_fill(causal, float("-inf")).softmax(-1) @ v
        x = x + self.o(att.transpose(1, 2).reshape(n, t, c))
        h = self.norm2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class _Decoder(nn.Module):
    def __init__(self, vocab: int, layers: int, width: int, heads: int, kv_heads: int, ffn: int,
                 max_seq: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList(_DecoderBlock(width, heads, kv_heads, ffn) for _ in range(layers))
        self.norm = _RMSNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        d = width // heads
        angles = torch.outer(torch.arange(max_seq).float(), 10000.0 ** (-torch.arange(0, d, 2).float() / d))
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        t = tokens.shape[1]
        h = self.embed(tokens)
        cos, sin = self.get_buffer("cos")[:t], self.get_buffer("sin")[:t]
        for block in self.blocks:
            h = block(h, cos, sin)
        return self.head(self.norm(h))


def llama_decoder(vocab: int = 32000, layers: int = 8, width: int = 1024, heads: int = 16, kv_heads: int = 4,
                  ffn: int = 2816, max_seq: int = 1024) -> nn.Module:
    """A Llama-style decoder (Touvron et al. 2023) for machines without transformers.

    RMSNorm, rotary positions, grouped-query causal attention written out as
    matrix products and a softmax, SwiGLU feed-forward, untied output head: the
    operators of ``hf:llama`` with ``attention="eager"``, in a module of its own.

    Parameters
    ----------
    vocab, layers, width, heads, kv_heads, ffn : int
        Vocabulary, blocks, hidden width, attention heads, key-value heads (a divisor of ``heads``),
        feed-forward width.
    max_seq : int
        The longest sequence (rotary tables).

    Returns
    -------
    nn.Module
        ``forward(tokens (N, T)) -> logits (N, T, vocab)``.
    """
    return _Decoder(vocab, layers, width, heads, kv_heads, ffn, max_seq)


# ---------------------------------------------------------------------- what runs


@dataclass(frozen=True)
class Case:
    """One model of the check: its name in the report, how `import_model` takes it, and what stood in."""

    label: str
    model: str
    options: dict[str, Any]
    note: str = ""  # what stood in for the model asked for, and why


def model_cases(small: bool, torchvision: str | None, transformers: str | None) -> list[Case]:
    """The check's two models (module docstring): GPU sizes, or ``small`` ones a CPU runs in seconds.

    Parameters
    ----------
    small : bool
        Small sizes (the CPU stand-in).
    torchvision, transformers : str or None
        Their versions when they import here, else None.

    Returns
    -------
    list of Case
        ResNet-50, then the Llama-style decoder.
    """
    if small:
        resnet = Case("resnet50", "resnet50", {"batch": 8, "input_shape": (3, 64, 64), "width": 4},
                      "small: the zoo's ResNet-50 at width 4 (torchvision's fixed widths take seconds a step on a CPU)")
    elif torchvision is not None:
        resnet = Case("resnet50", "torchvision:resnet50", {"batch": 32, "input_shape": (3, 224, 224)})
    else:
        resnet = Case("resnet50", "resnet50", {"batch": 32, "input_shape": (3, 224, 224), "num_classes": 1000},
                      "torchvision does not import here: the zoo's ResNet-50 (the same blocks, 1,000 classes)")
    sizes = ({"layers": 2, "width": 64, "heads": 4, "kv_heads": 2, "ffn": 128, "vocab": 128} if small else
             {"layers": 8, "width": 1024, "heads": 16, "kv_heads": 4, "ffn": 2816, "vocab": 32000})
    batch, sequence = (4, 64) if small else (8, 1024)
    if transformers is not None:
        llama = Case("llama", "hf:llama", {"batch": batch, "sequence": sequence, "attention": "eager", **sizes})
    else:
        llama = Case("llama", LLAMA_FACTORY,
                     {"batch": batch, "input_shape": (sequence,), "task": "language", "input_range": sizes["vocab"],
                      "max_seq": sequence, **sizes},
                     "transformers does not import here: the Llama-style decoder of benchmarks/gpu_check.py (the "
                     "zoo's gpt traces attention to a CPU-only kernel)")
    return [resnet, llama]


def profile_for(gpu_name: str | None) -> tuple[str, str]:
    """The shipped device profile matching a GPU's name, and a note when none matches.

    Parameters
    ----------
    gpu_name : str or None
        ``torch.cuda.get_device_name()``; None on the CPU.

    Returns
    -------
    tuple of (str, str)
        The profile's name (``h200`` for an H200, ``h100`` when nothing matches), and the note (empty when
        the name matched).
    """
    words = re.findall(r"[A-Z0-9]+", (gpu_name or "").upper())  # "NVIDIA H100 PCIe" -> NVIDIA, H100, PCIE
    for key, profile in (("H200", "h200"), ("H100", "h100-pcie" if "PCIE" in words else "h100"),
                         ("A100", "a100"), ("L4", "l4")):
        if key in words:
            return profile, ""
    if gpu_name is None:
        return "h100", "no GPU: the h100 profile's roofline, for the code path only"
    return "h100", f"no shipped profile matches '{gpu_name}': the h100 profile's roofline"


def auto_ready() -> tuple[bool, str]:
    """Whether ``auto`` can run here with every member: each built-in method loads and has its solvers.

    Returns
    -------
    tuple of (bool, str)
        Ready, and the first reason it is not.
    """
    for name in BUILTIN:
        try:
            ok, why = get_method(name).available()
        except MethodError as exc:
            ok, why = False, str(exc)
        if not ok:
            return False, why
    return True, ""


def _version(module: str) -> str | None:
    """The module's version when it imports here (a torchvision built for another torch fails to), else None."""
    try:
        return str(importlib.import_module(module).__version__)
    except Exception:  # ImportError, or the RuntimeError of a build for another torch
        return None


def environment(device: torch.device) -> dict[str, Any]:
    """Where the check ran: the GPU, torch, CUDA and cuDNN versions, Python and the optional libraries.

    Parameters
    ----------
    device : torch.device

    Returns
    -------
    dict
    """
    cuda = device.type == "cuda"
    props = torch.cuda.get_device_properties(device) if cuda else None
    return {
        "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if cuda else None,
        "gpu_memory_bytes": int(props.total_memory) if props is not None else None,
        "compute_capability": f"{props.major}.{props.minor}" if props is not None else None,
        "torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
        "tf32": {"matmul": torch.backends.cuda.matmul.allow_tf32, "cudnn": torch.backends.cudnn.allow_tf32},
        "python": platform.python_version(), "platform": platform.platform(),
        "cpu_threads": torch.get_num_threads(),
        "torchvision": _version("torchvision"), "transformers": _version("transformers"),
    }


# ---------------------------------------------------------------------- measuring


@dataclass
class Clock:
    """The check's wall-clock budget, shared between the models."""

    budget_s: float
    start: float = field(default_factory=time.monotonic)

    def left(self) -> float:
        """Seconds left of the budget, less what writing the outputs needs.

        Returns
        -------
        float
            Negative once the budget is spent.
        """
        return self.budget_s - WRITE_RESERVE_S - (time.monotonic() - self.start)

    def share(self, models_left: int) -> float:
        """The deadline of the next model: an equal share of what is left.

        Parameters
        ----------
        models_left : int
            The models still to check, the next one included.

        Returns
        -------
        float
            A ``time.monotonic()`` value.
        """
        return time.monotonic() + max(0.0, self.left()) / max(1, models_left)


def reserved_peak(device: torch.device, fn: Callable[[], Any]) -> tuple[Any, int | None]:
    """Run ``fn`` with the CUDA caching allocator's cache emptied and its peaks reset before; its reserved peak.

    Parameters
    ----------
    device : torch.device
    fn : callable

    Returns
    -------
    tuple
        ``fn()``'s result, and ``torch.cuda.max_memory_reserved`` after it (bytes the process held on the
        device at most, absolute); None on the CPU, whose allocator keeps no cache.
    """
    if device.type != "cuda":
        return fn(), None
    gc.collect()
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    result = fn()
    torch.cuda.synchronize(device)
    return result, int(torch.cuda.max_memory_reserved(device))


class ProfiledStepReserved:
    """`train`'s ``on_event``: the reserved peak of the schedule's profiled step (its second).

    After step 1 ends the cache is emptied and the peaks reset; after step 2
    ends, ``torch.cuda.max_memory_reserved`` is read: the most the process held
    on the device from the end of step 1 to the end of the profiled step.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.bytes: int | None = None

    def __call__(self, event: dict[str, Any]) -> None:
        if self.device.type != "cuda" or event.get("kind") != "step" or event.get("configuration") != "schedule":
            return
        if event.get("step") == 1:
            torch.cuda.synchronize(self.device)
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.device)
        elif event.get("step") == 2:
            torch.cuda.synchronize(self.device)
            self.bytes = int(torch.cuda.max_memory_reserved(self.device))


@contextlib.contextmanager
def traced_once() -> Iterator[None]:
    """While the check runs, `replay` and `train` re-trace each graph's model once, not at every call.

    Re-tracing is most of a small replay's time and seconds of a large one's;
    the program depends only on the graph. The memo lives here, around the
    check, until `remat_bench.torch.importer.program_for_graph` keeps one.

    Yields
    ------
    None
    """
    programs: dict[int, tuple[Graph, Program]] = {}

    def once(graph: Graph) -> Program:
        known = programs.get(id(graph))
        if known is None or known[0] is not graph:
            known = programs[id(graph)] = (graph, program_for_graph(graph))
        return known[1]

    saved = replay_module.program_for_graph, train_module.program_for_graph
    replay_module.program_for_graph = train_module.program_for_graph = once
    try:
        yield
    finally:
        replay_module.program_for_graph, train_module.program_for_graph = saved


@contextlib.contextmanager
def objects_frozen() -> Iterator[None]:
    """Keep the objects alive now (graphs, traced programs, libraries) out of the garbage collector's walks.

    The replay collects garbage before every timed run, so that no collection
    falls inside one; each collection walks every live object, which with two
    traced models and transformers loaded takes longer than a small model's
    step. Frozen (`gc.freeze`), they are not walked; garbage made meanwhile is
    collected as before.

    Yields
    ------
    None
    """
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _failure(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def _settle(device: torch.device) -> None:
    """Free what the last run left, so that the next one's memory starts from the same place."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()


# ---------------------------------------------------------------------- one model


@dataclass
class Setting:
    """What the check runs with: the device, the sizes, the methods, the roofline profile, the outputs."""

    device: torch.device
    small: bool
    methods: list[str]
    profile: str
    out: Path
    started: float = field(default_factory=time.monotonic)

    def say(self, message: str) -> None:
        """Print one progress line, with the seconds since the check began.

        Parameters
        ----------
        message : str
        """
        print(f"[{time.monotonic() - self.started:6.1f} s] {message}", flush=True)


def import_case(case: Case, setting: Setting, deadline: float) -> tuple[Graph, Graph, dict[str, Any]]:
    """The model's graph with costs measured on the device, its graph with the profile's roofline durations, and
    what the report says of them.

    Parameters
    ----------
    case : Case
    setting : Setting
    deadline : float
        ``time.monotonic()`` by which measuring stops (what is left falls back to FLOPs, said in the costs).

    Returns
    -------
    tuple of (Graph, Graph, dict)

    Raises
    ------
    RematBenchError
        A model that cannot be imported, or a roofline graph whose nodes differ from the measured one's.
    """
    start = time.monotonic()
    graph = import_model(case.model, device=str(setting.device),
                         measure_deadline=time.time() + max(1.0, deadline - start), **case.options)
    took = time.monotonic() - start
    roof = import_model(case.model, device_profile=setting.profile, workspace="none",
                        name=f"{graph.name}-{setting.profile}", **case.options)
    if [n.id for n in roof.nodes] != [n.id for n in graph.nodes]:
        raise RematBenchError(f"model '{case.model}' traced to other nodes for the {setting.profile} roofline")
    base, roof_base = baseline(graph), baseline(roof)
    costs = graph.metadata.get("costs", {})
    return graph, roof, {
        "graph": graph.name, "nodes": graph.n, "fixed_memory": graph.fixed_memory,
        "import_s": took, "roofline_import_s": time.monotonic() - start - took,
        "durations": costs.get("durations"), "duration_unit": graph.units.get("duration"),
        "workspace": costs.get("workspace"), "cost_notes": list(costs.get("notes", [])),
        "baseline": {"simulated_peak": base.peak, "calibrated_duration": base.duration,
                     "roofline_duration_ns": roof_base.duration},
    }


def solve(graph: Graph, roof: Graph, method: str, budget: str, limit: float) -> tuple[dict[str, Any], Any]:
    """One method at one budget, judged by the pipeline; its schedule simulated on the roofline graph too.

    Parameters
    ----------
    graph, roof : Graph
        The calibrated graph, and the same nodes with the profile's durations.
    method, budget : str
    limit : float
        The time limit, s.

    Returns
    -------
    tuple
        The row (status, simulated peak and duration, modelled overheads: calibrated and the profile's), and
        the schedule when one was found within the budget (else None).
    """
    start = time.monotonic()
    result = run(graph, method, budget, limit, {}, bound=False)
    schedule = result.schedule if result.status.found_schedule else None
    found = schedule is not None
    row: dict[str, Any] = {
        "method": method, "budget": float(budget), "status": str(result.status),
        "message": "" if found else result.message, "solve_s": time.monotonic() - start,
        "budget_bytes": result.budget, "simulated_peak": result.peak, "simulated_duration": result.duration,
        "recomputations": None, "modelled_overhead_pct": result.overhead_pct, "profile_overhead_pct": None,
    }
    if schedule is None:
        return row, None
    on_roof = simulate(roof, schedule)
    row["recomputations"] = on_roof.recomputations
    row["profile_overhead_pct"] = on_roof.overhead_pct(baseline(roof).duration) if on_roof.valid else None
    return row, schedule


# What a replay's JSON gives that the check keeps.
REPLAY_FIELDS = ("measured_peak", "simulated_peak", "peak_error_pct", "outputs_match", "max_abs_diff",
                 "within_budget", "measured_overhead_pct", "measured_overhead_low_pct",
                 "measured_overhead_high_pct", "measured_overhead_min_pct", "measured_overhead_max_pct", "pairs",
                 "modelled_overhead_pct", "overhead_error_pts", "step_time_s", "baseline_step_time_s",
                 "baseline_measured_peak", "baseline_simulated_peak", "timing_clock", "measurement", "note")


def replay_row(graph: Graph, schedule: Any, device: torch.device, profile_overhead: float | None) -> dict[str, Any]:
    """Replay a schedule against the baseline: peaks, outputs, measured and modelled overheads.

    Parameters
    ----------
    graph : Graph
    schedule : Schedule
    device : torch.device
    profile_overhead : float or None
        The roofline's modelled overhead, %, for its error.

    Returns
    -------
    dict
        `REPLAY_FIELDS`, ``peak_error_bytes``, ``reserved_peak`` (the whole replay's, CUDA only: the
        reference autograd step, both profiled runs and the timed pairs) and ``profile_error_pts``.
    """
    result, reserved = reserved_peak(device, lambda: replay(graph, schedule, str(device), repeats=PAIRS,
                                                            precision=0, max_pairs=PAIRS))
    data = result.to_json()
    row = {key: data.get(key) for key in REPLAY_FIELDS}
    row["peak_error_bytes"] = int(result.measured_peak - result.simulated_peak)
    row["reserved_peak"] = reserved
    measured = data.get("measured_overhead_pct")
    row["profile_error_pts"] = (measured - profile_overhead
                                if measured is not None and profile_overhead is not None else None)
    return row


# What an offload plan's replay adds to `REPLAY_FIELDS`.
OFFLOAD_FIELDS = ("measured_host_peak", "simulated_host_peak", "offloads", "reloads")


def offload_row(graph: Graph, roof: Graph, device: torch.device) -> dict[str, Any]:
    """Replay the baseline with every saved forward value sent to the host between the passes
    (`save_on_cpu_plan`), against the baseline: peaks, host peaks, outputs, overheads.

    Parameters
    ----------
    graph, roof : Graph
        The calibrated graph and the roofline one (`import_case`); the calibrated graph's own host link is
        used, else the roofline's (its data sheet's, in the same units).
    device : torch.device

    Returns
    -------
    dict
        `REPLAY_FIELDS`, `OFFLOAD_FIELDS`, ``link`` (the host link, as a graph file writes it), the simulated
        ``wait`` and ``to_host`` (bytes), ``peak_error_bytes`` and ``reserved_peak`` (CUDA only); or only
        ``note`` when neither graph has a link in the calibrated graph's units.
    """
    transfer = graph.transfer
    if transfer is None and graph.units.get("duration") == roof.units.get("duration"):
        transfer = roof.transfer
    if transfer is None:
        return {"note": "no host link in the graph's units to model the copies with"}
    moving = graph.with_transfer(transfer)
    plan = save_on_cpu_plan(moving, baseline_schedule(moving))
    sim = simulate(moving, plan)
    result, reserved = reserved_peak(device, lambda: replay(moving, plan, str(device), repeats=PAIRS, precision=0,
                                                            max_pairs=PAIRS))
    data = result.to_json()
    row = {key: data.get(key) for key in (*REPLAY_FIELDS, *OFFLOAD_FIELDS)}
    row.update(link=transfer.to_dict(), wait=sim.wait, to_host=sim.to_host,
               peak_error_bytes=int(result.measured_peak - result.simulated_peak), reserved_peak=reserved)
    return row


def train_row(graph: Graph, schedule: Any, device: torch.device, steps: int,
              with_eager: bool) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """A few training steps with the schedule (exact mode), and with eager autograd when asked.

    Parameters
    ----------
    graph : Graph
    schedule : Schedule
    device : torch.device
    steps : int
    with_eager : bool

    Returns
    -------
    tuple
        The schedule's figures (peak, reserved peak of its profiled step on CUDA, step times, losses, and
        against eager when it ran), and eager's (peak, step times) or None.
    """
    reserved = ProfiledStepReserved(device)
    report = train(graph, schedule, steps, mode="exact", device=device,
                   configurations=["schedule", "eager"] if with_eager else ["schedule"], on_event=reserved)
    ran = {c.name: c for c in report.configurations}
    mine = ran["schedule"]
    row = {"steps": steps, "measured_peak": mine.measured_peak, "simulated_peak": report.simulated_peak,
           "reserved_peak": reserved.bytes, "median_step_time_s": mine.median_step_time_s,
           "step_times_s": mine.step_times_s, "losses": mine.losses, "params_match": report.params_match,
           "max_loss_diff": report.max_loss_diff}
    eager = ran.get("eager")
    if eager is None:
        return row, None
    return row, {"measured_peak": eager.measured_peak, "median_step_time_s": eager.median_step_time_s,
                 "step_times_s": eager.step_times_s}


class _Phase:
    """The runs of one kind (replay, training) for one model: one starts only while the longest so far still
    fits before the model's deadline."""

    def __init__(self, kind: str, deadline: float, skipped: list[str]) -> None:
        self.kind, self.deadline, self.skipped = kind, deadline, skipped
        self.longest = 0.0

    @contextlib.contextmanager
    def attempt(self, what: str) -> Iterator[bool]:
        """Yields whether ``what`` fits in the model's share (the longest run of this kind so far); times it."""
        if time.monotonic() + self.longest > self.deadline:
            self.skipped.append(f"{self.kind} of {what}: out of time (its runs took up to {self.longest:.1f} s)")
            yield False
            return
        start = time.monotonic()
        try:
            yield True
        finally:
            self.longest = max(self.longest, time.monotonic() - start)


def solve_all(graph: Graph, roof: Graph, label: str, setting: Setting, deadline: float,
              skipped: list[str]) -> list[tuple[dict[str, Any], Any]]:
    """Every method at every budget, each with what is left of the model's share as its time limit at most.

    Parameters
    ----------
    graph, roof : Graph
        The calibrated graph and the roofline one (`import_case`).
    label : str
        The model's name in the report.
    setting : Setting
    deadline : float
        ``time.monotonic()`` by which the model's share ends.
    skipped : list of str
        Where a run left out for want of time is said.

    Returns
    -------
    list of tuple
        One (row, schedule) per run, the schedule None when none was found within the budget.
    """
    runs: list[tuple[dict[str, Any], Any]] = []
    for budget in BUDGETS:
        for method in setting.methods:
            left = deadline - time.monotonic()
            if left < 1.0:
                skipped.append(f"solving {label} with {method} at {budget}: out of time")
                continue
            setting.say(f"{label}: {method} at {budget}")
            try:
                row, schedule = solve(graph, roof, method, budget, min(TIME_LIMIT_S.get(method, FAST_TIME_LIMIT_S),
                                                                        left))
            except Exception as exc:  # recorded, never lost: the other runs go on
                row, schedule = {"method": method, "budget": float(budget), "status": "error",
                                 "message": _failure(exc)}, None
            runs.append((row, schedule))
    return runs


def measure_all(graph: Graph, label: str, runs: list[tuple[dict[str, Any], Any]], setting: Setting,
                deadline: float, skipped: list[str]) -> dict[str, Any] | None:
    """Replay every schedule found, then train with each (eager beside the first), while the share lasts.

    Each row gets ``replay`` and ``train`` (or ``replay_error``, ``train_error``: a failure is recorded and
    the others go on).

    Parameters
    ----------
    graph : Graph
    label : str
        The model's name in the report.
    runs : list of tuple
        `solve_all`'s rows and schedules.
    setting : Setting
    deadline : float
        ``time.monotonic()`` by which the model's share ends.
    skipped : list of str
        Where a run left out for want of time is said.

    Returns
    -------
    dict or None
        Eager training's figures (`train_row`), None when no training ran.
    """
    found = [(row, s) for row, s in runs if s is not None]
    replays, trains = _Phase("replay", deadline, skipped), _Phase("training", deadline, skipped)
    for row, schedule in found:
        what = f"{label} {row['method']} at {row['budget']}"
        with replays.attempt(what) as go:
            if go:
                setting.say(f"replay {what}")
                try:
                    row["replay"] = replay_row(graph, schedule, setting.device, row.get("profile_overhead_pct"))
                except Exception as exc:
                    row["replay_error"] = _failure(exc)
                _settle(setting.device)
    eager: dict[str, Any] | None = None
    steps = SMALL_TRAIN_STEPS if setting.small else TRAIN_STEPS
    for row, schedule in found:
        what = f"{label} {row['method']} at {row['budget']}"
        with trains.attempt(what) as go:
            if go:
                setting.say(f"train {what} ({steps} steps{'' if eager else ', and eager'})")
                try:
                    row["train"], ran = train_row(graph, schedule, setting.device, steps, with_eager=eager is None)
                    eager = eager or ran
                except Exception as exc:
                    row["train_error"] = _failure(exc)
                _settle(setting.device)
    return eager


def check_model(case: Case, setting: Setting, deadline: float) -> dict[str, Any]:
    """Import, solve, replay and train one model within its share of the time.

    Parameters
    ----------
    case : Case
    setting : Setting
    deadline : float
        ``time.monotonic()`` by which the model's share ends.

    Returns
    -------
    dict
        The model's record: how it was imported, its baseline three ways, one row per method and budget, the
        offload plan's replay (`offload_row`), what was skipped, and the error that stopped it, if any.
    """
    record: dict[str, Any] = {"label": case.label, "model": case.model, "options": case.options,
                              "note": case.note, "runs": [], "skipped": []}
    if deadline - time.monotonic() < 1.0:
        record["skipped"].append(f"{case.label}, all of it: out of time")
        return record
    setting.say(f"{case.label}: importing {case.model} (costs measured on {setting.device}; "
                f"and the {setting.profile} roofline)")
    try:
        graph, roof, info = import_case(case, setting, deadline)
    except Exception as exc:
        record["error"] = f"import: {_failure(exc)}"
        _settle(setting.device)
        return record
    record.update(info)
    runs = solve_all(graph, roof, case.label, setting, deadline, record["skipped"])
    record["runs"] = [row for row, _ in runs]
    with objects_frozen():
        eager = measure_all(graph, case.label, runs, setting, deadline, record["skipped"])
        if deadline - time.monotonic() < 1.0:
            record["skipped"].append(f"offload plan of {case.label}: out of time")
        else:
            setting.say(f"replay {case.label}'s offload plan")
            try:
                record["offload"] = offload_row(graph, roof, setting.device)
            except Exception as exc:  # recorded, never lost
                record["offload"] = {"error": _failure(exc)}
            _settle(setting.device)
    replayed = [r["replay"]["baseline_step_time_s"] for r in record["runs"]
                if r.get("replay") and r["replay"].get("baseline_step_time_s") is not None]
    record["baseline"].update(
        measured_replay_step_s=statistics.median(replayed) if replayed else None, replays=len(replayed),
        eager_train=eager)
    return record


# ---------------------------------------------------------------------- the outputs


def _n(value: Any) -> str:
    return "-" if value is None else f"{int(value):,}"


def _pct(value: Any) -> str:
    return "-" if value is None else f"{value:+.2f}"


def _ms(value: Any) -> str:
    return "-" if value is None else f"{1000 * value:.2f}"


def _interval(replayed: dict[str, Any]) -> str:
    low, high = replayed.get("measured_overhead_low_pct"), replayed.get("measured_overhead_high_pct")
    median = _pct(replayed.get("measured_overhead_pct"))
    return median if low is None or high is None else f"{median} [{low:+.2f}, {high:+.2f}]"


RUN_COLUMNS = ("method", "budget", "status", "simulated peak", "measured peak", "measured - simulated",
               "reserved peak (replay)", "outputs match", "modelled % (calibrated)", "modelled % (roofline)",
               "measured % [95%]", "error pts (calibrated)", "error pts (roofline)", "train peak",
               "train reserved peak", "train step ms", "note")


def run_cells(row: dict[str, Any]) -> list[str]:
    """One row of a model's runs table.

    Parameters
    ----------
    row : dict
        A run of the report.

    Returns
    -------
    list of str
        The cells of `RUN_COLUMNS`; ``-`` where nothing was measured.
    """
    rep, tr = row.get("replay") or {}, row.get("train") or {}
    note = row.get("message") or row.get("replay_error") or row.get("train_error") or rep.get("note") or ""
    match = rep.get("outputs_match")
    return [row["method"], f"{row['budget']:g}", row["status"], _n(row.get("simulated_peak")),
            _n(rep.get("measured_peak")), _n(rep.get("peak_error_bytes")), _n(rep.get("reserved_peak")),
            "-" if match is None else ("yes" if match else "NO"), _pct(row.get("modelled_overhead_pct")),
            _pct(row.get("profile_overhead_pct")), _interval(rep) if rep else "-",
            _pct(rep.get("overhead_error_pts")), _pct(rep.get("profile_error_pts")), _n(tr.get("measured_peak")),
            _n(tr.get("reserved_peak")), _ms(tr.get("median_step_time_s")), note.replace("|", "/")]


OFFLOAD_COLUMNS = ("offloads", "simulated peak", "measured peak", "measured - simulated", "reserved peak (replay)",
                   "outputs match", "host peak (simulated)", "host peak (measured)", "modelled %",
                   "measured % [95%]", "error pts", "note")


def offload_cells(row: dict[str, Any]) -> list[str]:
    """The offload plan's row of a model's section.

    Parameters
    ----------
    row : dict
        `offload_row`'s record (or an error).

    Returns
    -------
    list of str
        The cells of `OFFLOAD_COLUMNS`; ``-`` where nothing was measured.
    """
    match = row.get("outputs_match")
    note = row.get("error") or row.get("note") or ""
    return [_n(row.get("offloads")), _n(row.get("simulated_peak")), _n(row.get("measured_peak")),
            _n(row.get("peak_error_bytes")), _n(row.get("reserved_peak")),
            "-" if match is None else ("yes" if match else "NO"), _n(row.get("simulated_host_peak")),
            _n(row.get("measured_host_peak")), _pct(row.get("modelled_overhead_pct")),
            _interval(row) if "measured_overhead_pct" in row else "-", _pct(row.get("overhead_error_pts")),
            note.replace("|", "/")]


def _table(columns: tuple[str, ...] | list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table, and the blank line after it."""
    return ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns),
            *("| " + " | ".join(cells) + " |" for cells in rows), ""]


def model_markdown(record: dict[str, Any], profile: str) -> list[str]:
    """A model's section: how it was imported, its baseline three ways, its runs, what was skipped.

    Parameters
    ----------
    record : dict
        The model's record (`check_model`).
    profile : str
        The roofline's device profile.

    Returns
    -------
    list of str
        Lines.
    """
    lines = [f"## {record['label']}: `{record['model']}`", ""]
    options = ", ".join(f"{k} {v}" for k, v in record["options"].items())
    lines += [f"Options: {options}." + (f" {record['note']}." if record["note"] else ""), ""]
    if "error" in record:
        return [*lines, f"Stopped: {record['error']}", ""]
    if "graph" not in record:
        return [*lines, *(f"- skipped: {what}" for what in record["skipped"]), ""]
    base = record["baseline"]
    eager = base.get("eager_train") or {}
    lines += [f"Graph `{record['graph']}`: {record['nodes']} nodes, fixed memory {_n(record['fixed_memory'])} "
              f"bytes; durations {record['durations']} ({record['duration_unit']}), workspaces "
              f"{record['workspace']}; imported in {record['import_s']:.1f} s."
              + "".join(f" {note}" for note in record["cost_notes"]), ""]
    unit = record["duration_unit"]
    lines += _table(["baseline step", "value"], [
        ["simulated peak (bytes)", _n(base["simulated_peak"])],
        [f"calibrated duration ({unit})", _n(base["calibrated_duration"])],
        [f"{profile} roofline duration (ns)", _n(base["roofline_duration_ns"])],
        [f"measured in the replays (ms, median of {base['replays']})", _ms(base["measured_replay_step_s"])],
        ["eager training step (ms, median)", _ms(eager.get("median_step_time_s"))],
        ["eager training peak (bytes)", _n(eager.get("measured_peak"))],
    ])
    lines += _table(list(RUN_COLUMNS), [run_cells(row) for row in record["runs"]])
    if "offload" in record:
        link = record["offload"].get("link")
        said = "" if link is None else (
            f" over a link of {link['device_to_host']['bandwidth']:.3g} / {link['host_to_device']['bandwidth']:.3g} "
            f"bytes per {unit} ({link.get('source', 'no source')})")
        lines += [f"Offload plan (`save_on_cpu_plan`: every saved activation to the host between the passes){said}:",
                  ""]
        lines += _table(list(OFFLOAD_COLUMNS), [offload_cells(record["offload"])])
    lines += [f"- skipped: {what}" for what in record["skipped"]]
    return [*lines, ""] if record["skipped"] else lines


def markdown(report: dict[str, Any]) -> str:
    """The report as Markdown: the environment, then each model's section (`model_markdown`).

    Parameters
    ----------
    report : dict
        What the JSON holds.

    Returns
    -------
    str
    """
    env = report["environment"]
    lines = ["# GPU check", "",
             f"{report['when']}; {report['elapsed_s']:.0f} s of a {report['time_budget_s']:g} s budget"
             + ("; interrupted" if report.get("interrupted") else "") + ".", "",
             f"- device: {env['device']}" + (f" ({env['gpu']}, {_n(env['gpu_memory_bytes'])} bytes, compute "
                                             f"capability {env['compute_capability']})" if env["gpu"] else ""),
             f"- torch {env['torch']}, CUDA {env['cuda']}, cuDNN {env['cudnn']}, TF32 matmul "
             f"{env['tf32']['matmul']} / cuDNN {env['tf32']['cudnn']}; Python {env['python']}; torchvision "
             f"{env['torchvision']}; transformers {env['transformers']}",
             f"- roofline profile: {report['profile']}" + (f" ({report['profile_note']})"
                                                           if report["profile_note"] else ""),
             f"- methods: {', '.join(report['methods'])}; budgets: {', '.join(BUDGETS)} of the baseline peak; "
             f"{PAIRS} timed pairs per replay",
             *(f"- {note}" for note in report["notes"]), ""]
    for record in report["models"]:
        lines += model_markdown(record, report["profile"])
    return "\n".join(lines) + "\n"


def write(report: dict[str, Any], out: Path) -> None:
    """Write the JSON and the Markdown under ``out``, each atomically.

    Parameters
    ----------
    report : dict
    out : Path
        The folder (made when missing).
    """
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / JSON_NAME, json.dumps(report, indent=1, default=str) + "\n")
    atomic_write_text(out / MARKDOWN_NAME, markdown(report))


# ---------------------------------------------------------------------- the command


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (module docstring).

    Parameters
    ----------
    argv : list of str or None
        None: ``sys.argv[1:]``.

    Returns
    -------
    argparse.Namespace
    """
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_check",
                                     description="Import, solve, replay and train two models on a GPU; write "
                                                 "predictions beside measurements.")
    parser.add_argument("--device", choices=("cuda", "cpu"), default=None,
                        help="where to measure (default: cuda when present, else cpu with --small)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    parser.add_argument("--small", action="store_true", help="small models, seconds on a CPU (the CI stand-in)")
    parser.add_argument("--time-budget", type=float, default=DEFAULT_TIME_BUDGET_S,
                        help=f"wall-clock seconds for the whole check (default {DEFAULT_TIME_BUDGET_S:g})")
    parser.add_argument("--methods", default=None,
                        help=f"methods, separated by commas (default {','.join(FAST_METHODS)}, and auto when its "
                             "solvers are installed)")
    return parser.parse_args(argv)


def chosen_methods(given: str | None) -> tuple[list[str], list[str]]:
    """The methods to run, and notes on what was left out.

    Parameters
    ----------
    given : str or None
        ``--methods`` (None: the fast methods, and ``auto`` when `auto_ready`).

    Returns
    -------
    tuple of (list of str, list of str)

    Raises
    ------
    ValueError
        An unknown method, or none named.
    """
    if given is not None:
        names = [name.strip() for name in given.split(",") if name.strip()]
        unknown = [name for name in names if name not in BUILTIN and name != "auto"]
        if unknown or not names:
            raise ValueError(f"unknown method {unknown[0]!r}" if unknown else "--methods names no method")
        return names, []
    ready, why = auto_ready()
    return [*FAST_METHODS, "auto"] if ready else list(FAST_METHODS), [] if ready else [f"auto left out: {why}"]


def _notes(device: torch.device) -> list[str]:
    if device.type == "cuda":
        return ["reserved peak (replay): torch.cuda.max_memory_reserved over the whole replay (the reference "
                "autograd step, both profiled runs, the timed pairs), cache emptied and peaks reset before; "
                "absolute, not on the simulator's footing",
                "train reserved peak: the same from the end of training step 1 (cache emptied) to the end of "
                "the profiled step 2",
                "step times: CUDA events, from an idle device to an idle device"]
    return ["CPU stand-in: no reserved peaks (the CPU allocator keeps no cache); peaks from the profiler's "
            "memory events; step times read off the replay's CPU clock (timing_clock), not CUDA events"]


def _failed(report: dict[str, Any]) -> bool:
    """Whether anything failed: an import, a method, a replay, a training run, or outputs that differ."""
    for record in report["models"]:
        if "error" in record:
            return True
        for row in record["runs"]:
            if row["status"] == "error" or "replay_error" in row or "train_error" in row:
                return True
            if (row.get("replay") or {}).get("outputs_match") is False:
                return True
    return False


def _stop(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def start(args: argparse.Namespace) -> tuple[Setting, dict[str, Any]] | str:
    """The check's setting and its report, before any model; or the sentence that refuses the command line.

    Parameters
    ----------
    args : argparse.Namespace
        `parse_args`'s.

    Returns
    -------
    tuple of (Setting, dict) or str
    """
    if args.device == "cuda" and not torch.cuda.is_available():
        return "--device cuda: torch sees no CUDA device here (give --device cpu for the CPU stand-in)"
    if not (args.time_budget > WRITE_RESERVE_S and math.isfinite(args.time_budget)):
        return f"--time-budget must be a number of seconds above {WRITE_RESERVE_S:g}, not {args.time_budget:g}"
    try:
        methods, notes = chosen_methods(args.methods)
    except ValueError as exc:
        return f"--methods: {exc}; give names of `remat-bench methods`, or auto"
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    small = args.small or device.type == "cpu"
    if small and not args.small:
        notes.append("no GPU: the small models on the CPU (--small)")
    env = environment(device)
    profile, profile_note = profile_for(env["gpu"])
    report = {"when": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"), "environment": env,
              "small": small, "methods": methods, "budgets": [float(b) for b in BUDGETS], "pairs": PAIRS,
              "profile": profile, "profile_note": profile_note, "time_budget_s": args.time_budget,
              "notes": notes + _notes(device), "models": [], "elapsed_s": 0.0}
    return Setting(device, small, methods, profile, args.out), report


def main(argv: list[str] | None = None) -> int:
    """Run the check (module docstring).

    Parameters
    ----------
    argv : list of str or None
        The command line's arguments (None: ``sys.argv[1:]``).

    Returns
    -------
    int
        0 when everything ran (skips included), 1 when something failed or the outputs differed from
        autograd, 2 for a command line it refuses, 130 when interrupted (what was done is written).
    """
    started = start(parse_args(argv))
    if isinstance(started, str):
        print(f"error: {started}", file=sys.stderr)
        return 2
    setting, report = started
    clock = Clock(report["time_budget_s"])
    cases = model_cases(setting.small, report["environment"]["torchvision"], report["environment"]["transformers"])
    # `timeout` and the device tools stop a run with SIGTERM: written like an interrupt (main thread only).
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _stop) if main_thread else None
    status = 0
    try:
        with traced_once():
            for k, case in enumerate(cases):
                report["models"].append(check_model(case, setting, clock.share(len(cases) - k)))
                report["elapsed_s"] = time.monotonic() - clock.start
                write(report, setting.out)
    except KeyboardInterrupt:
        report["interrupted"], status = True, 130
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
    report["elapsed_s"] = time.monotonic() - clock.start
    write(report, setting.out)
    setting.say(f"wrote {setting.out / JSON_NAME} and {setting.out / MARKDOWN_NAME}")
    return status or (1 if _failed(report) else 0)


if __name__ == "__main__":
    sys.exit(main())
