"""Atomic file writes: a reader sees the old file or the new one, never half of either.

Every output the package writes (graphs, schedules, charts, reports, results)
goes through `atomic_write_bytes`, so a write that cannot happen is one
`OutputError` sentence naming the path and the reason, whatever the cause.
An output named by a symbolic link is written through it: the file the link
points to is replaced, and the link stays.

`safe_name` turns a name taken from data (a graph's name, a model's arguments)
into one file name, so a path derived from it stays in its folder.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import stat
import tempfile
from pathlib import Path

from remat_bench.core.errors import OutputError

# The first bytes of a file are enough to tell its format: every file remat-bench writes
# starts with {"format": ...}; reading more could mean reading a device forever.
HEAD_BYTES = 4096
_FORMAT = re.compile(rb'^\s*\{\s*"format"\s*:\s*"([^"\\]{1,64})"')
# A file name from data keeps these characters; the rest become '_'. Long names are cut (file systems
# refuse names above 255 bytes), keeping a hash of the whole so that different names stay different.
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
NAME_CHARS = 100


def safe_name(text: str, default: str = "graph") -> str:
    """``text`` as one file name that stays in its folder: no separators, never ``.``/``..`` or hidden.

    ``"chain-16"`` stays; ``".."`` becomes ``"_.."``, ``"a/b"`` becomes ``"a_b"``.

    Parameters
    ----------
    text : str
        A name taken from data.
    default : str
        The name for an empty ``text``.

    Returns
    -------
    str
        Letters, digits, ``.``, ``_`` and ``-`` only, at most ``NAME_CHARS`` characters: a longer name is cut
        and ends with a hash of ``text``, so that different names stay different.
    """
    name = _UNSAFE.sub("_", text) or default
    if name.startswith("."):
        name = "_" + name
    if len(name) > NAME_CHARS:
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        name = f"{name[:NAME_CHARS - 13]}-{digest}"
    return name


def _through_link(path: Path) -> Path:
    """The file a write to ``path`` replaces: the target of a symbolic link (so the link stays), else
    ``path``. A rename onto the link itself would replace the link by a plain file."""
    return Path(os.path.realpath(path)) if os.path.islink(path) else path


def cache_dir() -> Path:
    """The user cache: $REMAT_BENCH_CACHE, else $XDG_CACHE_HOME/remat-bench, else ~/.cache/remat-bench.

    Returns
    -------
    Path
        The folder, ``~`` expanded; it is not created here.
    """
    if os.environ.get("REMAT_BENCH_CACHE"):
        return Path(os.environ["REMAT_BENCH_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "remat-bench"


def _cannot(path: Path, exc: OSError, doing: str = "write") -> OutputError:
    reason = exc.strerror or str(exc)
    if exc.errno == errno.EPERM and doing == "write":
        reason += " (an immutable or protected file?)"
    error = OutputError(f"cannot {doing} {path}: {reason}; choose another path")
    error.errno = exc.errno
    return error


def file_format(path: Path) -> str | None:
    """The ``format`` a remat-bench file declares in its first bytes; None for anything else.

    Only regular files are opened (a device such as /dev/zero would never end).

    Parameters
    ----------
    path : Path
        Any path; of a regular file, only the first ``HEAD_BYTES`` bytes are read.

    Returns
    -------
    str or None
        The declared format (``remat-bench-graph``, ...); None for a path that is missing, unreadable or not a
        regular file, and for a file that does not start with ``{"format": ...}``.
    """
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        with open(path, "rb") as fh:
            head = fh.read(HEAD_BYTES)
    except OSError:
        return None
    match = _FORMAT.match(head)
    return match.group(1).decode("utf-8", "replace") if match else None


def check_writable(path: str | Path) -> None:
    """Refuse, before any work, an output that cannot be written atomically where it is named.

    The target must be a regular file or absent (a device, pipe or socket cannot be
    replaced by rename, and replacing /dev/stdout would replace the device node), and
    a temporary file must be creatable beside it (beside the file a symbolic link points
    to, which is what is written). An immutable target is only found when it is
    replaced; `atomic_write_bytes` then raises the same kind of error.

    Parameters
    ----------
    path : str or Path
        The output file; missing parent folders are created.

    Raises
    ------
    OutputError
        ``path`` is a folder or not a regular file, its parent is a file, or no file can be created beside it.
    """
    shown = Path(path)
    path = _through_link(shown)
    try:
        # What the name leads to, links followed (/dev/stdout is a link to a pipe or terminal).
        mode = os.stat(shown).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise _cannot(shown, exc) from None
    if mode is not None and stat.S_ISDIR(mode):
        raise OutputError(f"{shown}: is a folder; give a file name for the output")
    if mode is not None and not stat.S_ISREG(mode):
        raise OutputError(f"{shown}: is not a regular file (a device, pipe or socket); outputs are written "
                          "to a file and renamed into place: give a file path (or use --json for standard output)")
    parent = path.parent
    if parent.exists() and not parent.is_dir():
        raise OutputError(f"cannot write {shown}: {parent} is a file, not a folder; choose another path")
    try:
        parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=parent)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise _cannot(shown, exc) from None


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write to a temporary file beside ``path``, fsync it, then rename it into place.

    A symbolic link is written through: the temporary file goes beside its target, which it replaces.

    Parameters
    ----------
    path : str or Path
        The output file; missing parent folders are created, and a file already there keeps its permissions.
    data : bytes
        The whole content.

    Raises
    ------
    OutputError
        One sentence naming ``path`` and the reason, when it cannot be written or renamed into place; the
        file already there, if any, is left as it was.
    """
    shown = Path(path)
    path = _through_link(shown)
    try:
        if path.parent.exists() and not path.parent.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, f"{path.parent} is a file, not a folder")
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise _cannot(shown, exc) from None
    try:
        # mkstemp makes the file private (0600); give it the mode a plain open() would.
        try:
            mode = path.stat().st_mode & 0o777
        except FileNotFoundError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(tmp, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OutputError):
            raise
        raise _cannot(shown, exc) from None
    except BaseException:
        # Ctrl-C: leave the old file untouched and no litter behind.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    """`atomic_write_bytes` of ``text`` encoded as UTF-8.

    Parameters
    ----------
    path : str or Path
        The output file, as for `atomic_write_bytes`.
    text : str
        The whole content.

    Raises
    ------
    OutputError
        ``path`` cannot be written, as for `atomic_write_bytes`.
    """
    atomic_write_bytes(path, text.encode("utf-8"))
