"""``python -m remat_bench.app.cli``: the command line, as the ``remat-bench`` script runs it."""

from remat_bench.app.cli import main

main()
