"""The ``remat-bench`` group: its commands, and how any of them ends on bad input or Ctrl-C.

Every user-caused error becomes one sentence on stderr and its exit status
(2 for bad input); Ctrl-C that reaches here is status 130. A command whose standard
output was closed by its reader (``| head -1``) finishes its work and ends quietly with
status 141, as a unix tool killed by SIGPIPE does.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

import click
from rich.markup import escape

from remat_bench import __version__
from remat_bench.app.cli import graphs, methods, solve, sweeps, torch
from remat_bench.app.cli.helpers import STDOUT_CLOSED_STATUS, err, stdout_closed, teardown_skipped
from remat_bench.core.errors import RematBenchError, printable


class RematGroup(click.Group):
    """Turns RematBenchError into one sentence and its exit status; Ctrl-C into status 130; a closed
    standard output into status 141."""

    def main(self, args: Any = None, *main_args: Any, **kwargs: Any) -> Any:
        """Run the command line ``args`` (None: this process's own, ``sys.argv``), as click's group does.

        When the command line is the process's own and the command asked for it
        (`remat_bench.app.cli.helpers.skip_teardown`), the process ends as soon as the command has
        answered: output flushed and exit handlers run, without the interpreter's teardown.

        Parameters
        ----------
        args : list of str or None
            The arguments; None for the process's own (the ``remat-bench`` script, ``python -m``).
        *main_args, **kwargs
            As `click.Group.main` takes them.

        Returns
        -------
        Any
            What click's ``main`` returns (outside standalone mode).
        """
        try:
            return super().main(args, *main_args, **kwargs)
        except SystemExit as exc:
            if args is None and teardown_skipped():
                _end_now(exc.code)
            raise

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command ``ctx`` names; a bad input or Ctrl-C ends the process with one sentence.

        Parameters
        ----------
        ctx : click.Context

        Returns
        -------
        Any
            What the command returns.

        Raises
        ------
        SystemExit
            On a usage error or a `RematBenchError` (its exit status, 2 for bad input), Ctrl-C (130), or
            at the end of a command whose standard output was closed by its reader (141).
        """
        try:
            with _quiet_when_stdout_closed():
                return super().invoke(ctx)
        except click.UsageError as exc:
            # One sentence, as for every other bad input (click would add its usage lines).
            where = exc.ctx.command_path if exc.ctx is not None else ctx.command_path
            err.print(f"[bold red]error:[/] {escape(printable(exc.format_message()))} (see `{where} -h`)",
                      markup=True, highlight=False)
            sys.exit(exc.exit_code)
        except RematBenchError as exc:
            err.print(f"[bold red]error:[/] {escape(printable(str(exc)))}", markup=True, highlight=False)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            err.print("interrupted")
            sys.exit(130)


@contextlib.contextmanager
def _quiet_when_stdout_closed() -> Iterator[None]:
    """End with `STDOUT_CLOSED_STATUS` when the command's answer met a closed standard output.

    The command runs to its end first (``solve -o`` still writes its schedule); its own exit
    status would say what it found, which nobody reads once the answer was lost.
    """
    try:
        yield
    except SystemExit:
        if stdout_closed():
            sys.exit(STDOUT_CLOSED_STATUS)
        raise
    if stdout_closed():
        sys.exit(STDOUT_CLOSED_STATUS)


def _end_now(code: Any) -> None:
    """End the process with ``code`` (as `sys.exit` reads it) after flushing the output and running the exit
    handlers, without the interpreter's teardown (`remat_bench.app.cli.helpers.skip_teardown`)."""
    status = 0 if code is None else code if isinstance(code, int) else 1
    if not isinstance(code, int | None):
        print(code, file=sys.stderr)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BrokenPipeError:
            status = STDOUT_CLOSED_STATUS if stream is sys.stdout else status
        except (OSError, ValueError):  # a stream closed or unwritable: nothing more can be said on it
            pass
    atexit._run_exitfuncs()
    os._exit(status)


@click.group(cls=RematGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="remat-bench")
def main() -> None:
    """Compare tensor-rematerialization methods on one footing.

    Every method reads one graph format and writes one schedule format; one
    shared simulator scores every schedule for peak memory and duration.
    """


for _command in (solve.solve, solve.simulate, solve.floor, solve.bound, methods.methods, graphs.graphs,
                 sweeps.sweep, sweeps.plot, sweeps.report, torch.replay, torch.train):
    main.add_command(_command)
graphs.graphs.add_command(torch.import_torch)  # beside replay in cli/torch.py: both need PyTorch
