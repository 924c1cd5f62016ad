"""A Markdown report of a results folder: summary per method, best method per budget, charts, per-graph tables.

The report is plain Markdown (GitHub-flavoured tables) with the charts as
images beside it, linked relatively, so the report folder can be moved or
committed as it is. Aggregates follow qpbenchmark (`remat_bench.app.sweep.results`):
success rate, and shifted geometric means of overhead (shift 1 point, over
successful runs) and solve time (shift 1 s, over applicable runs, with a run
that gave no answer, neither a schedule within budget nor a proof that none
fits, counted at its time limit).

Bounds are shown generically: where runs carry ``lower_bound_any_order`` (a
bound valid for every schedule), the per-graph table shows it as the overhead
it implies; a method that only computes bounds or reorders (``bound``,
``reorder``) is a method like any other here.

- `write`: `write_report`, the document in its order, its charts, and `cost_sources`.
- `sections`: the sections of the results (summary, best, gap, production planners, input order, speed) and
  each graph's table.
- `prediction`: the simulator's prediction against what replays measured.
- `tables`: Markdown cells and tables, and the walk over graphs and budgets the sections share.
"""
