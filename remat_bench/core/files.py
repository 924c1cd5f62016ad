"""Atomic file writes: a reader sees the old file or the new one, never half of either.

Every output the package writes (graphs, schedules, charts, reports, results)
goes through `atomic_write_bytes`, so a write that cannot happen is one
`OutputError` sentence naming the path and the reason, whatever the cause.
An output named by a symbolic link is written through it: the file the link
points to is replaced, and the link stays.

Reading takes regular files only, up to a size, so that a path naming a device
(/dev/zero never ends) or a pipe (it waits for a writer) is one sentence, not a
hang or all of memory: `read_regular` reads a file whole, `open_regular` opens
one, and `check_regular` vets one before a reader that takes a path opens it.

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
from typing import BinaryIO

from remat_bench.core.errors import OutputError, RematBenchError

# The first bytes of a file are enough to tell its format: every file remat-bench writes
# starts with {"format": ...}; reading more could mean reading a device forever.
HEAD_BYTES = 4096
# The largest file read whole: a graph of the largest size generated (1,000,000 nodes, 10,000,000 edges) is
# a few hundred MB of JSON, and parsing takes several times its size in memory.
MAX_READ_BYTES = 2**30
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


def why_not_read(mode: int, size: int, limit: int | None) -> str | None:
    """Why a file of this mode and size is not read; None when it is.

    Parameters
    ----------
    mode : int
        ``st_mode`` of the file (``os.stat``).
    size : int
        ``st_size``, in bytes.
    limit : int or None
        The largest size read whole; None for any.

    Returns
    -------
    str or None
        A clause (``is a folder, not a file``), or None.
    """
    if stat.S_ISDIR(mode):
        return "is a folder, not a file"
    if not stat.S_ISREG(mode):
        return "is a device, pipe or socket, not a regular file, and is not read (it could never end)"
    if limit is not None and size > limit:
        return f"is {size:,} bytes, more than the {limit:,} read whole"
    return None


def _then(hint: str) -> str:
    """``"; hint"``, or nothing for an empty hint (a reader whose caller says what to do)."""
    return f"; {hint}" if hint else ""


def _read_error(path: str | Path, exc: OSError, error: type[Exception], hint: str) -> Exception:
    """The one-sentence ``error`` for a path that could not be looked at or opened."""
    if isinstance(exc, FileNotFoundError):
        what = "no such file"
    elif isinstance(exc, IsADirectoryError):
        what = "is a folder, not a file"
    else:
        what = f"cannot be read ({exc.strerror or exc})"
    return error(f"{path}: {what}{_then(hint)}")


def _refusal(path: str | Path, info: os.stat_result, error: type[Exception], limit: int | None,
             hint: str) -> Exception | None:
    """The one-sentence ``error`` for a file a reader does not take (`why_not_read`); None for one it does."""
    why = why_not_read(info.st_mode, info.st_size, limit)
    return None if why is None else error(f"{path}: {why}{_then(hint)}")


def check_regular(path: str | Path, error: type[Exception] = RematBenchError, limit: int | None = MAX_READ_BYTES,
                  hint: str = "give the path of a file") -> None:
    """Refuse, before a reader opens it, a path that is not a regular file of at most ``limit`` bytes.

    For readers that take a path (`remat_bench.core.graph_io.load_graph`, Parquet): the file is vetted, not
    opened, so what it names may still change before it is read; `read_regular` reads what it vetted.

    Parameters
    ----------
    path : str or Path
        The file; links are followed.
    error : type of Exception
        The error raised (`GraphError`, `ScheduleError`, ...).
    limit : int or None
        The largest size taken, in bytes; None for any.
    hint : str
        What to do, ending the sentence.

    Raises
    ------
    error
        ``{path}: {what is wrong}; {hint}`` for a missing path, a folder, a device, pipe or socket, or a
        file above ``limit``.
    """
    try:
        info = os.stat(path)
    except OSError as exc:
        raise _read_error(path, exc, error, hint) from None
    refusal = _refusal(path, info, error, limit, hint)
    if refusal is not None:
        raise refusal


def open_regular(path: str | Path, error: type[Exception] = RematBenchError, limit: int | None = MAX_READ_BYTES,
                 hint: str = "give the path of a file") -> BinaryIO:
    """A regular file of at most ``limit`` bytes, opened for reading in binary.

    The file is opened without waiting (a pipe with no writer would block the open) and vetted by what
    was opened, so a path swapped after a check is not read either.

    Parameters
    ----------
    path : str or Path
        The file; links are followed.
    error : type of Exception
        The error raised (`GraphError`, `ScheduleError`, ...).
    limit : int or None
        The largest size taken, in bytes; None for any.
    hint : str
        What to do, ending the sentence.

    Returns
    -------
    BinaryIO
        Open at its start; the caller closes it.

    Raises
    ------
    error
        As `check_regular` says, or the file cannot be opened.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise _read_error(path, exc, error, hint) from None
    refusal = _refusal(path, os.fstat(fd), error, limit, hint)  # before fdopen, which refuses a folder itself
    if refusal is not None:
        os.close(fd)
        raise refusal
    return os.fdopen(fd, "rb")


def read_regular(path: str | Path, error: type[Exception] = RematBenchError, limit: int | None = MAX_READ_BYTES,
                 hint: str = "give the path of a file") -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes, read whole (`open_regular`).

    Parameters
    ----------
    path : str or Path
        The file; links are followed.
    error : type of Exception
        The error raised (`GraphError`, `ScheduleError`, ...).
    limit : int or None
        The largest size taken, in bytes; None for any.
    hint : str
        What to do, ending the sentence.

    Returns
    -------
    bytes

    Raises
    ------
    error
        As `check_regular` says, or the file cannot be opened or read.
    """
    with open_regular(path, error, limit, hint) as fh:
        try:
            data = fh.read() if limit is None else fh.read(limit + 1)
        except OSError as exc:
            raise error(f"{path}: cannot be read ({exc.strerror or exc}){_then(hint)}") from None
    if limit is not None and len(data) > limit:  # it grew after the check
        raise error(f"{path}: is more than the {limit:,} bytes read whole{_then(hint)}")
    return data


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


# A pattern's walk stops after this many files and folders: thousands of graphs under a folder pass, while
# a pattern over a whole system tree (``/proc/**``, whose links lead back to the root) is refused in seconds.
MAX_GLOB_ENTRIES = 200_000


def _magic(part: str) -> bool:
    return any(ch in part for ch in "*?[")


def _component_matches(name: str, pattern: str) -> bool:
    # As `glob`: a name starting with a dot is matched only by a pattern component that starts with one.
    if name.startswith(".") and not pattern.startswith("."):
        return False
    import fnmatch

    return fnmatch.fnmatchcase(name, pattern)


def _parts_match(names: list[str], patterns: list[str]) -> bool:
    """Whether the path components ``names`` match the pattern components, ``**`` standing for any folders."""
    if not patterns:
        return not names
    head, rest = patterns[0], patterns[1:]
    if head == "**":
        return any(_parts_match(names[i:], rest) for i in range(len(names) + 1)
                   if not any(n.startswith(".") for n in names[:i]))
    return bool(names) and _component_matches(names[0], head) and _parts_match(names[1:], rest)


def bounded_glob(pattern: str, error: type[Exception] = RematBenchError,
                 limit: int = MAX_GLOB_ENTRIES) -> list[str]:
    """The regular files ``pattern`` matches (``*``, ``?``, ``[...]``, and ``**`` for any folders), sorted.

    Written here rather than with `glob.iglob`: the standard library's walk follows links to folders, so a
    pattern over ``/proc`` (whose ``root`` links lead back to ``/``) never ends, and it cannot be told to stop
    after so many entries. This walk does not follow links to folders (a link to a file is matched), visits
    only the folders the pattern can reach, and gives up after ``limit`` entries.

    Parameters
    ----------
    pattern : str
        A glob pattern, absolute or relative to the working folder.
    error : type of Exception
        What a pattern that visits too many entries raises.
    limit : int
        The most files and folders the walk may visit.

    Returns
    -------
    list of str
        The paths of the regular files matched (links to regular files included), as the pattern spells them.

    Raises
    ------
    error
        The walk visited more than ``limit`` entries.
    """
    parts = pattern.split(os.sep)
    fixed = 0
    while fixed < len(parts) - 1 and not _magic(parts[fixed]):
        fixed += 1
    root = os.sep.join(parts[:fixed]) if fixed else ""
    if pattern.startswith(os.sep) and not root:
        root = os.sep
    rest = [p for p in parts[fixed:] if p]
    if not rest or not any(_magic(p) for p in rest):
        return [pattern] if os.path.isfile(pattern) else []
    deep = "**" in rest
    found: list[str] = []
    visited = 0
    stack: list[tuple[str, list[str]]] = [(root, [])]
    while stack:
        folder, names = stack.pop()
        try:
            with os.scandir(folder or ".") as entries:
                listed = list(entries)
        except OSError:
            continue  # a folder that cannot be listed matches nothing
        for entry in listed:
            visited += 1
            if visited > limit:
                raise error(f"the pattern {pattern} visits more than {limit:,} files and folders under "
                            f"{root or '.'} without ending; narrow it to the folder of the graphs")
            path_names = [*names, entry.name]
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if is_dir:
                depth = len(path_names)
                # As `glob`, ``**`` does not enter hidden folders (``.venv``, ``.git``) unless the pattern names one.
                if deep:
                    reachable = not entry.name.startswith(".") or any(p.startswith(".") for p in rest)
                else:
                    reachable = depth < len(rest) and _component_matches(entry.name, rest[depth - 1])
                if reachable:
                    stack.append((os.path.join(folder, entry.name) if folder else entry.name, path_names))
            elif _parts_match(path_names, rest):
                path = os.path.join(folder, entry.name) if folder else entry.name
                with contextlib.suppress(OSError):
                    if stat.S_ISREG(os.stat(path).st_mode):
                        found.append(path)
    return sorted(found)
