"""The commands that need PyTorch: ``graphs import-torch`` (docs/pytorch.md) and ``replay`` (docs/design.md
section 9). Without PyTorch each is one sentence saying how to install it, exit status 2."""

from __future__ import annotations

import json
import math
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from remat_bench.app.cli.helpers import SECONDS, check_output, err, key_values, load, out, show
from remat_bench.core.budget import format_amount
from remat_bench.core.graph import Graph
from remat_bench.core.provenance import CostWarning, cost_source
from remat_bench.torch import DEFAULT_MAX_PAIRS, DEFAULT_PRECISION, DEFAULT_REPEATS
from remat_bench.torch.isolated import RUN_TIME_LIMIT, RunStopped

# The most timed pairs of a replay and steps of a training run: a larger count is a typing slip (a run stopped by
# its pace says so too, within seconds).
MAX_REPEATS = 10_000
MAX_STEPS = 1_000_000


@click.command("import-torch")
@click.argument("model")
@click.option("--batch", type=click.IntRange(min=1), help="Batch size (default 8).")
@click.option("--input-shape", metavar="DxDx...",
              help="Per-sample input shape, e.g. 3x32x32 (zoo models have a default).")
@click.option("--durations", type=click.Choice(["calibrated", "flops", "profile"]), default="calibrated",
              show_default=True,
              help="calibrated: each operator timed on this machine, in place in whole passes of the step "
                   "(median of --repeats passes, ns; one CPU thread, its CPU time; cached by operator "
                   "signature, so re-imports time nothing); flops: counted from "
                   "the trace, no run; profile: the former name of calibrated. A step too large to run here "
                   "falls back to flops, with a warning.")
@click.option("--workspace", type=click.Choice(["auto", "measure", "none"]), default="auto", show_default=True,
              help="Scratch memory of each operator: auto measures it on this machine (0, with a warning, when "
                   "the step cannot run here); measure does too, and refuses when it cannot; none leaves it 0.")
@click.option("--device-profile", metavar="NAME|FILE",
              help="Estimate durations for another device instead of timing them here: each operator's roofline "
                   "time (ns) from its FLOPs and bytes moved, on a shipped profile (h100, h100-pcie, h200, a100, "
                   "l4: `graphs profiles` lists them) or a YAML file of your own. An estimate, not a measurement; "
                   "not with --durations.")
@click.option("--repeats", type=click.IntRange(min=1), default=5, show_default=True,
              help="Timed passes of the step after a warm-up pass, every operator timed in place in each, for "
                   "calibrated durations.")
@click.option("--task", type=click.Choice(["classify", "segment", "language", "regress"]),
              help="The loss: cross-entropy over (N, C), (N, C, ...) or next-token (N, T, V) logits, or "
                   "mean squared error (default: the zoo's; classify an (N, C) output, else regress).")
@click.option("--input-dtype", type=click.Choice(["float32", "float64", "float16", "bfloat16", "int64", "int32"]),
              help="Dtype of the input batch (default: int64 with --task language, else float32).")
@click.option("--vocab", type=click.IntRange(min=1),
              help="Integer inputs are ids in [0, N) (default with --task language: the logits' vocabulary).")
@click.option("--kwarg", "kwargs", multiple=True, metavar="KEY=VALUE",
              help="Argument for the model's factory or constructor, repeatable; VALUE is read as a JSON "
                   "literal (16, true, [1, 2], \"text\") when it is one, else as a string.")
@click.option("--time-limit", "-t", type=SECONDS, default=600.0, show_default=True,
              help="Seconds to build, trace and measure the model; it runs in a child process, stopped then.")
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True)
def import_torch(model: str, batch: int | None, input_shape: str | None, durations: str,
                 workspace: str, device_profile: str | None, repeats: int, task: str | None,
                 input_dtype: str | None, vocab: int | None, kwargs: tuple[str, ...], time_limit: float,
                 output: Path) -> None:
    """Trace MODEL's training step into a graph: a zoo name, an ecosystem model or package.module:factory.

    Zoo: mlp, vgg11, resnet18, resnet50, unet, gpt, and families never tuned
    on: gru, dunet, moe, convnext. A factory runs only when it is an
    nn.Module subclass or a function in a file of your own (never the
    standard library). Tracing uses fake tensors, so any batch size traces
    without allocating it; the costs are then measured by running the step
    on real tensors here, when it fits in memory (--durations flops
    --workspace none runs nothing). --device-profile h100 plans for a device
    you are not on: durations are estimated for it, not timed. The graph
    records how its costs were obtained (`graphs show` says).

    \b
    The ecosystem's models, with random weights (never downloaded; needs
    `pip install remat-bench[models]`), at their standard sizes unless --kwarg says:
      torchvision:resnet50 --batch 32          any torchvision classification,
                                               segmentation or video model
      timm:vit_small_patch16_224 --kwarg img_size=64 --kwarg depth=6
      hf:llama --kwarg layers=8 --kwarg width=1024 --kwarg heads=16
               --kwarg kv_heads=4 --kwarg sequence=512
      hf:gpt2 --kwarg layers=6 --kwarg vocab=8192
      hf:bert --kwarg sequence=128             masked-LM logits at every position
      (also hf:mistral, hf:qwen2)
    hf: fields: layers, width, heads, kv_heads, ffn, vocab, max_positions, dropout,
    sequence (tokens per sample), attention (sdpa or eager), or any field of
    the family's transformers config.
    """
    _require_torch("graphs import-torch")
    from remat_bench.core.graph_io import save_graph
    from remat_bench.torch.isolated import trace_model

    check_output(output, [], "remat-bench-graph")
    profile = _device_profile(device_profile)
    shape = _parse_shape(input_shape) if input_shape else None
    # In a child process: the factory and forward pass are the user's code, which may hang or exit.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CostWarning)
        g = trace_model(dict(model=model, batch=batch, input_shape=shape, durations=durations, workspace=workspace,
                             repeats=repeats, task=task, input_dtype=input_dtype, input_range=vocab,
                             model_kwargs=_parse_kwargs(kwargs), device_profile=profile), time_limit)
    for w in caught:
        if issubclass(w.category, CostWarning):
            err.print(f"[yellow]warning:[/] {escape(str(w.message))}", highlight=False)
    save_graph(g, output)
    out.print(f"wrote {output}: {g.name} ({g.n} nodes, {g.num_edges} edges, fixed memory "
              f"{format_amount(g.fixed_memory, 'bytes')})")
    out.print(f"costs: {escape(cost_source(g).describe())}", highlight=False)


@click.command()
@click.argument("graph")
@click.argument("schedule", type=click.Path(path_type=Path))
@click.option("--device", type=click.Choice(["cuda", "cpu"]), help="Default: cuda when present, else cpu.")
@click.option("--repeats", type=click.IntRange(min=1, max=MAX_REPEATS), default=DEFAULT_REPEATS, show_default=True,
              help="Timed runs of the schedule at least, each paired with one of the baseline just before it "
                   "(6 or more give the measured overhead a 95% interval).")
@click.option("--precision", type=click.FloatRange(min=0), default=DEFAULT_PRECISION, show_default=True,
              help="Pairs go on past --repeats until the measured overhead's 95% interval is within +-this many "
                   "points (0: exactly --repeats pairs).")
@click.option("--max-pairs", type=click.IntRange(min=1, max=MAX_REPEATS), default=DEFAULT_MAX_PAIRS,
              show_default=True, help="Timed pairs at most.")
@click.option("--threads", type=click.IntRange(min=1, max=1024),
              help="CPU threads for the operators (default: those the graph's costs were measured with, else 1).")
@click.option("--steps", type=click.IntRange(min=0, max=1000), default=0, show_default=True,
              help="Then time every step of the schedule and of the baseline in place, this many passes each, "
                   "beside its modelled duration: where the error of the modelled overhead comes from.")
@click.option("--no-baseline", is_flag=True,
              help="Do not run the baseline: no measured overhead, no baseline peak.")
@click.option("--time-limit", "-t", type=SECONDS, default=RUN_TIME_LIMIT, show_default=True,
              help="Seconds for the whole replay (it runs in a child process, stopped then; one whose first "
                   "pairs say it would take longer is stopped at once).")
@click.option("--link", metavar="LINK", default=None,
              help="The host link the schedule was planned with, when not the graph's own (as solve --link).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def replay(graph: str, schedule: Path, device: str | None, repeats: int, precision: float, max_pairs: int,
           threads: int | None, steps: int, no_baseline: bool, time_limit: float, link: str | None,
           as_json: bool) -> None:
    """Run SCHEDULE with real tensors through PyTorch and measure the real peak and overhead.

    For a graph imported with `graphs import-torch`, every step runs the
    model's real operator and the loss and gradients are checked against
    plain autograd; for other graphs each node allocates its size and reads
    its inputs. The baseline (every node once, in file order) runs in turns
    with the schedule, so the overhead is measured as the simulator models
    it. Exit status 1 when the outputs differ from autograd, or when the
    measured peak is above the budget the schedule file holds.
    """
    _require_torch("replay")
    from remat_bench.core.link import with_link
    from remat_bench.torch.isolated import replay_isolated
    from remat_bench.torch.replay import load_schedule_for, resolve_device

    g = with_link(load(graph), link)
    sched = load_schedule_for(g, schedule)  # refuses a schedule written for another graph
    dev = str(resolve_device(device))  # a device not here is refused before a child starts
    pairs = f"{repeats} to {max(repeats, max_pairs)}" if precision > 0 and max_pairs > repeats else f"{repeats}"
    progress = RunProgress(f"replaying {schedule.name} on {g.name} ({pairs} timed runs"
                           f"{'' if no_baseline else ', each beside the baseline'})", as_json)
    with progress:
        result = replay_isolated(g, sched, repeats=repeats, time_limit=time_limit, on_event=progress,
                                 device=dev, with_baseline=not no_baseline, precision=precision,
                                 max_pairs=max_pairs, threads=threads, step_passes=0 if no_baseline else steps)
    show(result.to_json(), as_json, lambda: _replayed(g, result))
    if result.within_budget is False and result.budget is not None:
        unit = g.units.get("memory", "")
        over = result.measured_peak - result.budget
        err.print(f"over budget: the measured peak {format_amount(result.measured_peak, unit)} is above the "
                  f"schedule's budget {format_amount(result.budget, unit)} by {format_amount(over, unit)}: "
                  f"{escape(result.budget_note)}", highlight=False)
    sys.exit(1 if result.outputs_match is False or result.within_budget is False else 0)


def _replayed(g: Graph, r: Any) -> Table:
    unit = g.units.get("memory", "")
    rows = [("graph", f"{g.name} ({'real operators' if r.mode == 'model' else 'synthetic tensors'}, {r.device})"),
            ("measured peak", f"{format_amount(r.measured_peak, unit)}  ({r.peak_error_pct:+.3f}% vs simulated)"),
            ("simulated peak", format_amount(r.simulated_peak, unit))]
    if r.budget is not None:
        verdict = "[green]measured peak within it[/]" if r.within_budget else "[red]measured peak above it[/]"
        rows.append(("budget", f"{format_amount(r.budget, unit)}  ({verdict})"))
    rows.append(("fixed memory", f"{format_amount(r.measured_fixed, unit)} measured, "
                                 f"{format_amount(r.fixed_memory, unit)} in the graph"))
    if r.outputs_match is not None:
        verdict = "[green]yes[/]" if r.outputs_match else "[red]no[/]"
        rows.append(("outputs match autograd", f"{verdict}  (max abs diff {r.max_abs_diff:.3g}, max rel diff "
                                               f"{r.max_rel_diff:.3g}; tolerance rtol 1e-5, atol 1e-6)"))
    rows += _timing_rows(r, unit)
    rows.append(("steps", f"{r.steps} ({r.computes} computes, {r.recomputations} recomputations)"))
    if r.measured_host_peak is not None:
        rows.append(("copies", f"{r.offloads} offloads, {r.reloads} reloads; host peak "
                               f"{format_amount(r.measured_host_peak, unit)} held (simulated "
                               f"{format_amount(r.simulated_host_peak, unit)})"))
    rows.append(("measured by", r.measurement))
    if r.note:
        rows.append(("note", r.note))
    if r.attribution:
        rows += _attribution_rows(r.attribution)
    return key_values(rows)


def _attribution_rows(a: dict[str, Any]) -> list[tuple[str, str]]:
    """Where the time goes (`remat_bench.torch.attribution`), as `_replayed` shows it: the error's terms, the
    time outside the steps, and the operator kinds and nodes whose recomputations account for most of it."""
    def ms(ns: float) -> str:
        return f"{ns / 1e6:.2f} ms"

    s, b, rec = a["schedule"], a["baseline"], a["recomputations"]
    rows = [("steps in place", f"{a['passes']} passes each: overhead measured {a['measured_overhead_pct']:+.2f}%, "
                               f"modelled {a['modelled_overhead_pct']:+.2f}%; error {a['overhead_error_pts']:+.2f} "
                               f"points = recomputations {a['recomputations_error_pts']:+.2f} + the rest "
                               f"{a['rest_error_pts']:+.2f}"),
            ("recomputations", f"{rec['count']}: measured {ms(rec['measured_ns'])}, modelled {ms(rec['modelled_ns'])}"),
            ("schedule run", f"{ms(s['run_ns'])}: steps {ms(s['steps_ns'])}, outside them {ms(s['outside_ns'])}; "
                             f"modelled {ms(s['modelled_ns'])}"),
            ("baseline run", f"{ms(b['run_ns'])}: steps {ms(b['steps_ns'])}, outside them {ms(b['outside_ns'])}; "
                             f"modelled {ms(b['modelled_ns'])}")]
    for op in a["ops"][:5]:
        rows.append(("  operator", f"{op['op']}: {op['recomputations']} recomputations, measured "
                                   f"{ms(op['measured_ns'])}, modelled {ms(op['modelled_ns'])} "
                                   f"({op['error_ns'] / 1e6:+.2f} ms)"))
    for node in a["nodes"][:5]:
        rows.append(("  node", f"{node['id']} ({node['op']}), computed {node['computations']} times: "
                               f"recomputations measured {ms(node['recomputed_measured_ns'])}, modelled "
                               f"{ms(node['recomputed_modelled_ns'])} ({node['error_ns'] / 1e6:+.2f} ms)"))
    return rows


def _timing_rows(r: Any, unit: str) -> list[tuple[str, str]]:
    """Step times, measured against modelled overhead, and the baseline's peaks, as `_replayed` shows them."""
    modelled = f"modelled duration {format_amount(r.simulated_duration)} {r.duration_unit}"
    if r.step_time_s is None:
        return [("wall time", f"{r.wall_time_s:.3f} s, profiled run  ({modelled})")]
    rows = []
    base = "" if r.baseline_step_time_s is None else f"; baseline {r.baseline_step_time_s:.3f} s"
    threads = "" if r.threads is None else f", {r.threads} thread{'s' if r.threads != 1 else ''}"
    rows.append(("step time", f"{r.step_time_s:.3f} s median of {r.repeats}{base}  ({modelled}; "
                              f"{r.clock or 'wall clock'}{threads})"))
    measured = r.measured_overhead
    if measured is not None:
        interval = ("no 95% interval under 6 pairs" if measured.low_pct is None else
                    f"95% interval {measured.low_pct:+.2f}% to {measured.high_pct:+.2f}%")
        rows.append(("overhead", f"measured {measured.median_pct:+.2f}% ({interval}; paired runs: min "
                                 f"{measured.min_pct:+.2f}%, max {measured.max_pct:+.2f}%), modelled "
                                 f"{r.modelled_overhead_pct:+.2f}%; error {r.overhead_error_pts:+.2f} points"))
    else:
        rows.append(("overhead", f"modelled {r.modelled_overhead_pct:+.2f}%; not measured: the baseline did not run "
                                 f"({escape(r.baseline_note)})"))
    if r.baseline_measured_peak is not None:
        rows.append(("baseline peak", f"{format_amount(r.baseline_measured_peak, unit)} measured "
                                      f"({r.baseline_peak_error_pct:+.3f}% vs simulated "
                                      f"{format_amount(r.baseline_simulated_peak, unit)})"))
    return rows


def _device_profile(given: str | None) -> Any:
    """``--device-profile`` loaded here (a bad file is one sentence before any tracing); refused beside an
    explicit ``--durations``, which the profile's roofline replaces."""
    if given is None:
        return None
    from remat_bench.core.device_profile import load_device_profile

    if click.get_current_context().get_parameter_source("durations") is not click.core.ParameterSource.DEFAULT:
        raise click.BadParameter("a device profile gives the durations (its roofline estimates), so --durations "
                                 "cannot be given with --device-profile", param_hint="--durations")
    return load_device_profile(given)


def _require_torch(command: str) -> None:
    """One sentence and exit status 2 when PyTorch is missing (escaped: the hint has brackets)."""
    from remat_bench.torch import TorchMissingError, require_torch

    try:
        require_torch(command)
    except TorchMissingError as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}")
        sys.exit(exc.exit_code)


def _parse_kwargs(pairs: tuple[str, ...]) -> dict[str, Any]:
    """``--kwarg key=value`` pairs; a value is a JSON literal when it parses as one (16, true), else text."""
    kwargs: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise click.BadParameter(f"'{pair}' is not of the form key=value with a Python name as key",
                                     param_hint="--kwarg")
        try:
            kwargs[key] = json.loads(text)
        except ValueError:
            kwargs[key] = text
    return kwargs


def _parse_shape(text: str) -> tuple[int, ...]:
    parts = text.replace(",", "x").replace("*", "x").split("x")
    try:
        shape = tuple(int(p) for p in parts if p.strip())
    except ValueError:
        shape = ()
    if not shape or any(d < 1 for d in shape):
        raise click.BadParameter(f"'{text}' is not a shape such as 3x32x32", param_hint="--input-shape")
    return shape


@click.command()
@click.argument("model")
@click.argument("schedule", type=click.Path(path_type=Path))
@click.option("--steps", type=click.IntRange(min=2, max=MAX_STEPS), default=20, show_default=True,
              help="Optimizer steps of each configuration (the second one's peak is measured).")
@click.option("--mode", type=click.Choice(["exact", "compiled"]), default="exact", show_default=True,
              help="The schedule exactly, operator by operator, or its plan under torch.compile.")
@click.option("--configurations", "-c", default="schedule,eager,compile,compile-budget", show_default=True,
              help="Comma-separated: schedule, eager (plain autograd), compile (torch.compile), "
                   "compile-budget (torch.compile at PyTorch's activation_memory_budget for the schedule's budget).")
@click.option("--lr", type=float, default=0.01, show_default=True, help="SGD learning rate, a positive number.")
@click.option("--device", type=click.Choice(["cuda", "cpu"]), help="Default: cuda when present, else cpu.")
@click.option("--batch", type=click.IntRange(min=1), help="With a model name: as graphs import-torch takes it.")
@click.option("--input-shape", metavar="DxDx...", help="With a model name: as graphs import-torch takes it.")
@click.option("--task", type=click.Choice(["classify", "segment", "language", "regress"]),
              help="With a model name: as graphs import-torch takes it.")
@click.option("--kwarg", "kwargs", multiple=True, metavar="KEY=VALUE",
              help="With a model name: as graphs import-torch takes it.")
@click.option("--time-limit", "-t", type=SECONDS, default=RUN_TIME_LIMIT, show_default=True,
              help="Seconds for the whole run, every configuration included (it runs in a child process, "
                   "stopped then, with the losses it had printed; one whose first steps say it would take "
                   "longer is stopped at once).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def train(model: str, schedule: Path, steps: int, mode: str, configurations: str, lr: float, device: str | None,
          batch: int | None, input_shape: str | None, task: str | None, kwargs: tuple[str, ...],
          time_limit: float, as_json: bool) -> None:
    """Train MODEL with SCHEDULE for --steps steps, beside plain eager training and torch.compile.

    MODEL is the graph file SCHEDULE was solved on (written by `graphs import-torch`), or a model as
    `graphs import-torch` takes it (then imported here, and SCHEDULE's steps must fit its nodes).
    Every configuration starts from the same parameters (the model's seed) and trains on the same
    batches with SGD; each prints its losses, its measured peak and its median step time. Exit
    status 1 when the schedule's losses or final parameters differ from eager training's (exact
    mode), or when its measured peak is above the schedule's budget.
    """
    _require_torch("train")
    from remat_bench.torch.isolated import train_isolated
    from remat_bench.torch.replay import resolve_device
    from remat_bench.torch.train import schedule_for_training

    chosen = _configurations(configurations)
    if not (math.isfinite(lr) and lr > 0):
        raise click.BadParameter(f"the learning rate must be a positive number, not {lr:g}", param_hint="--lr")
    g, imported = _train_graph(model, batch, input_shape, task, kwargs)
    sched, sim = schedule_for_training(g, schedule, imported)  # simulated once, here
    dev = str(resolve_device(device))  # a device not here is refused before a child starts
    progress = RunProgress(f"training {g.name} for {steps} steps ({', '.join(chosen)})", as_json)
    try:
        with progress:
            report = train_isolated(g, sched, steps, configurations=chosen, time_limit=time_limit,
                                    on_event=progress, mode=mode, device=dev, lr=lr, simulation=sim)
    except RunStopped as stopped:
        show(progress.partial_json(str(stopped)), as_json, progress.partial_table)
        raise
    show(report.to_json(), as_json, lambda: _trained(g, report))
    mine = report.configurations[0]
    over = report.budget is not None and mine.measured_peak is not None and mine.measured_peak > report.budget
    # Compiled training may part from eager's by more than rounding where a ReLU's input rounds across zero
    # (docs/pytorch.md): said in the table, not an error.
    differs = mode == "exact" and report.params_match is False
    if over:
        err.print(f"over budget: the schedule's measured peak {format_amount(mine.measured_peak, 'bytes')} is above "
                  f"its budget {format_amount(report.budget, 'bytes')}", highlight=False)
    if differs:
        err.print(f"the schedule's training differs from eager training: losses by up to {report.max_loss_diff:.3g}, "
                  f"parameters by up to {report.max_param_diff:.3g}", highlight=False)
    sys.exit(1 if over or differs else 0)


def _configurations(text: str) -> list[str]:
    """``--configurations``: each a known configuration, named once, at least one."""
    from remat_bench.torch.train import CONFIGURATIONS, configuration_fault

    chosen = [c.strip() for c in text.split(",") if c.strip()]
    if not chosen:
        raise click.BadParameter(f"name at least one of {', '.join(CONFIGURATIONS)}", param_hint="--configurations")
    fault = configuration_fault(chosen)
    if fault is not None and fault[0] == "unknown":
        raise click.BadParameter(f"'{fault[1]}' is not one of {', '.join(CONFIGURATIONS)}",
                                 param_hint="--configurations")
    if fault is not None:
        raise click.BadParameter(f"'{fault[1]}' is named twice; name each configuration once",
                                 param_hint="--configurations")
    return chosen


def _train_graph(model: str, batch: int | None, input_shape: str | None, task: str | None,
                 kwargs: tuple[str, ...]) -> tuple[Graph, bool]:
    """A graph file, or the model imported here with the default costs (as `graphs import-torch` does); and
    whether it was imported here."""
    if Path(model).suffix == ".json" or Path(model).is_file():
        given = [name for name, value in (("--batch", batch), ("--input-shape", input_shape), ("--task", task),
                                          ("--kwarg", kwargs)) if value]
        if given:
            raise click.BadParameter(f"{model} is a graph file, whose model, batch and shapes are fixed; "
                                     f"{given[0]} applies only when MODEL names a model to import",
                                     param_hint=given[0])
        return load(model), False
    from remat_bench.torch.isolated import TRACE_TIME_LIMIT, trace_model

    shape = _parse_shape(input_shape) if input_shape else None
    return trace_model(dict(model=model, batch=batch, input_shape=shape, task=task,
                            model_kwargs=_parse_kwargs(kwargs)), TRACE_TIME_LIMIT), True


class RunProgress:
    """What a replay or training run shows while it runs, and what it had measured when it was stopped.

    On a terminal a status line (redrawn by rich); off one, once the run has taken `LINE_EVERY_S` seconds, a
    line on standard error at the next event and every `LINE_EVERY_S` seconds after (a short run prints
    none); warnings at once, either way. It is the ``on_event`` of
    `remat_bench.torch.isolated.train_isolated` and ``replay_isolated``.

    Parameters
    ----------
    text : str
        What is being done.
    as_json : bool
        The command prints JSON: no status line (the lines on standard error still come).
    """

    LINE_EVERY_S = 10.0

    def __init__(self, text: str, as_json: bool) -> None:
        self.text = text
        self.now = "starting (building the model)"
        self.live = not as_json and err.is_terminal
        self.last_line = time.monotonic()
        self.losses: dict[str, list[float]] = {}
        self.times: dict[str, list[float]] = {}
        self._status: Any = None

    def __enter__(self) -> RunProgress:
        if self.live:
            self._status = err.status(self)
            self._status.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._status is not None:
            self._status.__exit__(*exc)

    def __rich__(self) -> str:
        return f"{escape(self.text)}: {escape(self.now)}"

    def _line(self) -> None:
        if time.monotonic() - self.last_line < self.LINE_EVERY_S:
            return
        self.last_line = time.monotonic()
        if not self.live:
            err.print(f"{escape(self.text)}: {escape(self.now)}", highlight=False)

    def __call__(self, event: dict[str, Any]) -> None:
        """Take one event of the run (`remat_bench.torch.train.Events`, or replay's)."""
        kind = event.get("kind")
        if kind == "warning":
            err.print(f"[yellow]warning:[/] {escape(str(event['text']))}", highlight=False)
            return
        if kind == "configuration":
            self.now = f"{event['configuration']} ({event['index']}/{event['of']})"
            self._line()
            return
        if kind == "step":
            name = str(event["configuration"])
            self.losses.setdefault(name, []).append(float(event["loss"]))
            if event.get("time_s") is not None:
                self.times.setdefault(name, []).append(float(event["time_s"]))
            self.now = f"{name}: step {event['step']:,}/{event['steps']:,}, loss {event['loss']:.6f}"
        elif kind == "measured":
            self.now = "peak measured; timing"
        elif kind == "pair":
            self.now = f"timed pair {event['pair']:,}/{event['of']:,} ({event['time_s']:.3f} s)"
        self._line()

    def partial_json(self, stopped: str) -> dict[str, Any]:
        """What a stopped training run had measured, as ``train --json`` prints it then.

        Parameters
        ----------
        stopped : str
            Why it stopped.

        Returns
        -------
        dict
        """
        return {"stopped": stopped,
                "configurations": [{"name": name, "losses": losses, "step_times_s": self.times.get(name, [])}
                                   for name, losses in self.losses.items()]}

    def partial_table(self) -> Table:
        """What a stopped training run had measured: each configuration's losses so far.

        Returns
        -------
        Table
        """
        table = Table(title="stopped before its end: the steps that ran")
        for column in ("configuration", "steps", "first loss", "last loss", "median step"):
            table.add_column(column, justify="left" if column == "configuration" else "right")
        for name, losses in self.losses.items():
            times = sorted(self.times.get(name, []))
            median = f"{times[len(times) // 2] * 1000:.1f} ms" if times else "-"
            table.add_row(name, f"{len(losses):,}", f"{losses[0]:.6f}", f"{losses[-1]:.6f}", median)
        if not self.losses:
            table.caption = "no step had ended"
        return table


NOTE_CHARS = 240  # a configuration's note in train's table: a compiled plan's differences can run long


def _trained(g: Graph, report: Any) -> Table:
    table = Table(title=f"{g.name}: {report.steps} steps on {report.device} ({report.mode} mode)")
    for column in ("configuration", "measured peak", "vs simulated", "median step", "first loss", "last loss",
                   "note"):
        table.add_column(column, justify="left" if column in ("configuration", "note") else "right")
    for c in report.configurations:
        peak = format_amount(c.measured_peak, "bytes") if c.measured_peak is not None else "-"
        simulated = report.as_compiled_peak if c.name == "schedule-compiled" else report.simulated_peak
        vs = (f"{100 * (c.measured_peak / simulated - 1):+.3f}%"
              if c.measured_peak is not None and c.name.startswith("schedule") and simulated else "")
        step = f"{c.median_step_time_s * 1000:.1f} ms" if c.median_step_time_s is not None else "-"
        first = f"{c.losses[0]:.6f}" if c.losses else "-"
        last = f"{c.losses[-1]:.6f}" if c.losses else "-"
        note = c.note
        if len(note) > NOTE_CHARS:
            note = note[:NOTE_CHARS].rsplit(" ", 1)[0] + " ... (--json: all of it)"
        table.add_row(c.name, peak, vs, step, first, last, escape(note))
    if report.max_loss_diff is not None:
        rtol, atol = report.tolerance
        verdict = "equal to" if report.params_match else "[red]different to[/]"
        reference = report.compile_max_param_diff
        if not report.params_match and reference is not None and report.max_param_diff <= reference:
            verdict = "different, by no more than torch.compile's own training differs from eager's; tolerance"
        compiled = (f", as compiled {format_amount(report.as_compiled_peak, 'bytes')}"
                    if report.as_compiled_peak is not None else "")
        table.caption = (f"schedule against eager: losses differ by at most {report.max_loss_diff:.3g}, "
                         f"parameters after the last step by at most {report.max_param_diff:.3g} ({verdict} "
                         f"rtol {rtol:g}, atol {atol:g}); simulated peak "
                         f"{format_amount(report.simulated_peak, 'bytes')}{compiled}"
                         + (f", budget {format_amount(report.budget, 'bytes')}" if report.budget else "")
                         + (f"; torch.compile against eager: losses by at most {report.compile_max_loss_diff:.3g}, "
                            f"parameters by at most {report.compile_max_param_diff:.3g}"
                            if report.compile_max_param_diff is not None else ""))
    return table
