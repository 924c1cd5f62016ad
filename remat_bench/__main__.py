"""``python -m remat_bench``: the command line (`remat_bench.app.cli`)."""

from remat_bench.app.cli import main

main()
