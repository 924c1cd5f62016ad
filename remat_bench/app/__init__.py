"""The application: the pipeline every run goes through, sweeps, charts, reports, published graphs and the CLI.

The top layer: it may import every other one, and nothing imports it.
"""
