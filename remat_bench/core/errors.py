"""Errors a user can cause, each carrying one sentence and an exit status.

The CLI prints ``str(error)`` and exits with ``error.exit_code``; nothing else
of a user-caused error ever reaches the terminal.
"""


import re

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def printable(text: str) -> str:
    """``text`` with control characters shown as escapes (``\\x00``): a name quoted from a user's file
    must not reach the terminal raw.

    Parameters
    ----------
    text : str
        Text quoted from a user's file or arguments.

    Returns
    -------
    str
        ``text`` with every control character but tab and newline written as its Python escape.
    """
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


class RematBenchError(Exception):
    """Base class: a problem with what the user asked for, explained in one sentence."""

    exit_code = 2


class GraphError(RematBenchError):
    """A graph file that cannot be read, or does not describe a valid graph."""


class ScheduleError(RematBenchError):
    """A schedule file that cannot be read or does not fit its graph."""


class BudgetError(RematBenchError):
    """A budget string that cannot be understood."""


class MethodError(RematBenchError):
    """An unknown method, an unknown or mistyped parameter, or a missing dependency."""


class DeviceProfileError(RematBenchError):
    """An unknown device profile, or a profile file that cannot be read or breaks its schema."""


class ConfigError(RematBenchError):
    """A sweep configuration that cannot be run."""


class OutputError(RematBenchError, OSError):
    """An output that cannot be written (a read-only or missing folder, a device, an immutable file).

    Also an OSError, so code that guards a write against OSError keeps working.
    """


class ModelTooLargeError(RematBenchError):
    """A formulation whose model would not fit in memory; the message names the estimate."""

    exit_code = 1
