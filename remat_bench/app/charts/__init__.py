"""Charts of sweep results and schedules, one module per kind (`kinds.KINDS` lists them).

Every chart is a plain function that takes a results table or simulated schedules and returns a
`matplotlib.figure.Figure` (``tradeoff_figure`` ...); `common.save` writes one as PNG or SVG (or PDF)
by the file's suffix. The figures are built with `Figure` directly, never through pyplot's global state,
so they render headless (Agg) and from threads.

Where methods agree, no series hides another: identical series share one line in alternating colours
and are named ("greedy = checkmate"), points at (nearly) one place are spread sideways in page units,
and distinct timeline lines are stacked a line width apart; each chart says which it did.

- `common`: method styles (one colour and marker per method in every chart), the results table as
  charts read it, shared drawing, `save`.
- `selection`: the runs a chart draws, by graph and method.
- `tradeoff`, `scaling`: overhead against budget, solve time against graph size.
- `timeline`, `intervals`: memory at every step of schedules of one graph; when each value is held.
- `progress`, `profile`, `time_to_best`: from a sweep's progress table, how fast methods get there.
"""
