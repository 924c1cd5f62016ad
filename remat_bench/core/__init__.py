"""The model: graphs and their formats, schedules, the simulator and clean-up, budgets, errors, run control.

Nothing here imports a solver library or any other layer of the package; every
other layer builds on it (docs/design.md, "Layers").
"""
