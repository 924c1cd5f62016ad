"""The ``remat-bench`` command line (docs/design.md section 7): parse, call the library, format.

`main` holds the group and how commands end on bad input; each command group has
its module (`solve`: solve, simulate, floor, bound; `graphs`; `methods`; `sweeps`:
sweep, plot, report; `torch`: import-torch, replay), and `helpers` what they
share. Every user-caused error becomes one sentence on stderr and exit status 2;
``solve`` exits 0 when a schedule within budget was found and 1 otherwise.
"""

from remat_bench.app.cli.main import main

__all__ = ["main"]
