"""Published graphs the project does not ship: where they are found, and fetching them.

The seven graphs of the Moccasin paper's Table 2 (Bartan et al., ICML 2023)
are distributed in the ``data/`` folder of the public repository
haoming-codes/moccasin. remat-bench does not copy them into its tree; it
names them ``paper:<name>`` (``paper:random_layered_n250``) and finds them,
file by file, in this order:

1. the folder ``$PAPER_GRAPHS``;
2. ``../shared/graphs/paper`` beside the checkout (where CI keeps them);
3. the user cache, ``$REMAT_BENCH_CACHE/graphs/paper`` (default
   ``$XDG_CACHE_HOME/remat-bench``, else ``~/.cache/remat-bench``), which
   `fetch` fills.

`fetch` downloads each file from the repository at a pinned commit (or from
``--source``: another base URL, or a local folder), checks its SHA-256
against the hash pinned here, and only then renames it into place, so an
interrupted or corrupted download never leaves a file that looks complete.
A hostile or broken source cannot do worse than fail the fetch with one
sentence: a body longer than the pinned size is cut off one byte past it,
the whole fetch has a deadline (a per-read timeout alone lets a source that
drips bytes hold it forever), and a failed fetch removes its partial file
and any folder it created and did not fill, while the files that arrived stay.
The standard library's urllib does the download: the files are small (800 kB
in all) and a dependency for HTTP would buy nothing here (none of the usual
clients has a whole-transfer deadline either).
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import secrets
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from remat_bench.core.errors import RematBenchError
from remat_bench.core.files import cache_dir

# The checkout's root when the package runs from one (an editable install); elsewhere the
# folder that holds the installed package, where no ../shared is expected.
CHECKOUT = Path(__file__).resolve().parents[2]
PREFIX = "paper:"


class DatasetError(RematBenchError):
    """A published graph that is not here, or a download that failed or does not match its hash."""


@dataclass(frozen=True)
class PublishedFile:
    name: str  # the file name here: random_layered_n100.json
    original: str  # its name in the source repository
    sha256: str
    size: int  # bytes


@dataclass(frozen=True)
class Dataset:
    name: str
    description: str
    source: str  # base URL of the pinned folder
    files: tuple[PublishedFile, ...]

    def file(self, stem: str) -> PublishedFile:
        """The dataset's file of that name.

        Parameters
        ----------
        stem : str
            The file's name here, with or without ``.json`` (``random_layered_n100``).

        Returns
        -------
        PublishedFile

        Raises
        ------
        DatasetError
            A name that is not one of the dataset's, listing them.
        """
        for f in self.files:
            if stem in (f.name, f.name.removesuffix(".json")):
                return f
        raise DatasetError(
            f"'{PREFIX}{stem}' is not one of the published graphs; they are "
            + ", ".join(PREFIX + f.name.removesuffix(".json") for f in self.files)
        )


MOCCASIN_COMMIT = "4da8878932a0fb7edee4ef71ac8719dfdf5d9a07"

PAPER = Dataset(
    name="paper",
    description="the seven graphs of the Moccasin paper's Table 2 (haoming-codes/moccasin, data/)",
    source=f"https://raw.githubusercontent.com/haoming-codes/moccasin/{MOCCASIN_COMMIT}/data",
    files=(
        PublishedFile("random_layered_n100.json", "random_layered_n100_w0.27_nlv0.75_ed0.2_scd0.14.json",
                      "9d8c75c4962d0bc45bf4fd73a51a8e66cbb975904bba0c133ea1bfca2032419e", 25956),
        PublishedFile("random_layered_n250.json", "random_layered_n250_w0.43_nlv0.75_ed0.2_scd0.14.json",
                      "b048fb63c4857481fa53b31775507d21dceb5e203da3a63f95691eb9343d227d", 80709),
        PublishedFile("random_layered_n500.json", "random_layered_n500_w0.36_nlv0.75_ed0.2_scd0.14.json",
                      "6a437a2c7eef7ad7d13f2dad9cae0ae8823c15454d900ec06292f22809ba4138", 187045),
        PublishedFile("random_layered_n1000.json", "random_layered_n1000_w0.31_nlv0.75_ed0.2_scd0.14.json",
                      "adb564e95412b872dfb97db78618d364c7f8207664ff74d603f0d52b78fac582", 416982),
        PublishedFile("checkmate_fcn8_vgg_train.json", "fcn_8_vgg (MLSys)_32_(416, 608, 3)_train_nx.json",
                      "9bbdd4c8615068f80ceae170ba89bc1541de9fca3a583ca47f5e29d483c00435", 11947),
        PublishedFile("checkmate_resnet50_train.json", "ResNet50 (MLSys)_256_(224, 224, 3)_train_nx.json",
                      "ad49efb20824a07ece0b11ba9a5449ba06e63ef352f0914decbe5471dbab1b57", 60749),
        PublishedFile("checkmate_vgg16_train.json", "VGG16 (MLSys)_256_(224, 224, 3)_train_nx.json",
                      "4a62f7b7331e597b4b81fea77df7e1a8e31ca3e83b492d397cbee35975c1d30d", 7053),
    ),
)
DATASETS = {PAPER.name: PAPER}
FETCH_HINT = "fetch them with `remat-bench graphs fetch paper`"


def search_path(dataset: Dataset | None = None) -> list[Path]:
    """The folders a published graph is looked for in, in order.

    Parameters
    ----------
    dataset : Dataset or None
        The dataset (None: the paper's graphs); it names the folder under the shared and cache folders.

    Returns
    -------
    list of Path
        ``$PAPER_GRAPHS`` when set, the shared folder beside the checkout, then the user cache; a folder need
        not exist.
    """
    dataset = dataset or PAPER
    folders = []
    if os.environ.get("PAPER_GRAPHS"):
        folders.append(Path(os.environ["PAPER_GRAPHS"]).expanduser())
    folders.append(CHECKOUT.parent / "shared" / "graphs" / dataset.name)
    folders.append(cache_dir() / "graphs" / dataset.name)
    return folders


def find(stem: str, dataset: Dataset | None = None) -> Path | None:
    """The path of one published graph (``random_layered_n100`` or its file name), or None.

    Parameters
    ----------
    stem : str
        The graph's name here, with or without ``.json``.
    dataset : Dataset or None
        The dataset it belongs to (None: the paper's graphs).

    Returns
    -------
    Path or None
        The file in the first folder of `search_path` that holds it; None when none does.

    Raises
    ------
    DatasetError
        A name that is not one of the dataset's.
    """
    dataset = dataset or PAPER
    f = dataset.file(stem)
    for folder in search_path(dataset):
        if (folder / f.name).is_file():
            return folder / f.name
    return None


def missing(dataset: Dataset | None = None) -> list[str]:
    """The file names of the dataset found in none of the folders of `search_path`.

    Parameters
    ----------
    dataset : Dataset or None
        The dataset (None: the paper's graphs).

    Returns
    -------
    list of str
        File names (``random_layered_n100.json``), in the dataset's order; empty when all are here.
    """
    dataset = dataset or PAPER
    return [f.name for f in dataset.files if find(f.name, dataset) is None]


def locate(stem: str, dataset: Dataset | None = None) -> Path:
    """Like `find`, but a graph that is not here is a DatasetError saying how to get it.

    Parameters
    ----------
    stem : str
        The graph's name here, with or without ``.json``.
    dataset : Dataset or None
        The dataset it belongs to (None: the paper's graphs).

    Returns
    -------
    Path

    Raises
    ------
    DatasetError
        A name that is not one of the dataset's, or a graph on none of the folders (naming them, and how to
        fetch it).
    """
    dataset = dataset or PAPER
    path = find(stem, dataset)
    if path is None:
        where = ", ".join(str(p) for p in search_path(dataset))
        raise DatasetError(f"the published graph {dataset.file(stem).name} is not on this machine "
                           f"(looked in {where}): {FETCH_HINT}")
    return path


def resolve(text: str) -> Path | None:
    """``paper:<name>`` -> its path (a DatasetError if it is not here); None for any other text.

    A published graph's own name (what results and `graphs show` print: the source file's
    stem, ``random_layered_n100_w0.27_nlv0.75_ed0.2_scd0.14``) is accepted too, with or
    without the prefix.

    Parameters
    ----------
    text : str
        A name a user wrote.

    Returns
    -------
    Path or None
        The published graph's file; None when ``text`` names no published graph (it may name another graph).

    Raises
    ------
    DatasetError
        A published graph that is not on this machine, or a ``paper:`` name that is not one of them.
    """
    name = text[len(PREFIX):] if text.startswith(PREFIX) else text
    for f in PAPER.files:
        stem = f.original.removesuffix(".json")
        if name in (stem, stem.removesuffix("_nx")):  # the node-link reader drops "_nx" from names
            return locate(f.name)
    if not text.startswith(PREFIX):
        return None
    return locate(name)


def matching(pattern: str, dataset: Dataset | None = None) -> list[Path]:
    """The published graphs here whose names match a shell pattern (``random_layered_n*``).

    Parameters
    ----------
    pattern : str
        An `fnmatch` pattern over the names here, with or without ``.json``; case matters.
    dataset : Dataset or None
        The dataset (None: the paper's graphs).

    Returns
    -------
    list of Path
        The files, in the dataset's order; empty when no name matches.

    Raises
    ------
    DatasetError
        A matching graph that is not on this machine.
    """
    dataset = dataset or PAPER
    import fnmatch

    names = [f.name for f in dataset.files
             if fnmatch.fnmatchcase(f.name.removesuffix(".json"), pattern.removesuffix(".json"))]
    return [locate(name, dataset) for name in names]


def sha256_of(path: Path) -> str:
    """The SHA-256 of a file's bytes, read in blocks.

    Parameters
    ----------
    path : Path
        The file.

    Returns
    -------
    str
        The digest in lowercase hexadecimal.
    """
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass
class Fetched:
    name: str
    path: Path
    action: str  # "downloaded", "copied" or "present" (already there with the right hash)
    source: str


class FetchError(DatasetError):
    """A fetch that stopped part-way; ``fetched`` holds the files that are in place, checked, and stay."""

    def __init__(self, message: str, fetched: list[Fetched]) -> None:
        super().__init__(message)
        self.fetched = fetched


Progress = Callable[[str, int, int], None]  # (file name, bytes so far, bytes expected)

SCHEMES = ("http", "https", "file")
# The whole fetch: the seven files (800 kB) take seconds on any link, and a per-read timeout alone
# lets a source that sends one byte now and then hold the fetch forever.
DEADLINE_S = 600.0
# One read: a source silent this long has stalled.
READ_TIMEOUT_S = 60.0


class _Failed(Exception):
    """One file's failure: what happened and what to do, joined by `fetch` with what was kept."""

    def __init__(self, what: str, hint: str) -> None:
        super().__init__(what)
        self.what, self.hint = what, hint


def fetch(dataset: Dataset | None = None, dest: Path | None = None, source: str | None = None,
          progress: Progress | None = None, timeout: float = READ_TIMEOUT_S,
          deadline: float = DEADLINE_S) -> list[Fetched]:
    """Put every file of ``dataset`` in ``dest`` (default: the cache), each checked against its SHA-256.

    ``source`` is a base URL (``http(s)://``, ``file://``) or a local folder;
    each file is looked for there under its original name, then under its
    name here. A file already in ``dest`` with the right hash is kept. A
    download goes to a hidden temporary file in ``dest``, is hashed as it
    arrives and renamed into place only when the hash matches; a source that
    sends more than the file's pinned size is cut off just past it. The
    whole fetch must end within ``deadline`` seconds, each read within
    ``timeout``. A failure is a `FetchError` naming the files that did arrive
    (they stay); it leaves no partial file, and no folder that the fetch
    created and did not fill.

    Parameters
    ----------
    dataset : Dataset or None
        What to fetch (None: the paper's graphs).
    dest : Path or None
        The folder the files go to, created if need be (None: ``graphs/<dataset>`` in the user cache).
    source : str or None
        Where to fetch from (None: the dataset's pinned URL).
    progress : Progress or None
        Called with (file name, bytes so far, bytes expected) as each download arrives.
    timeout : float
        The longest wait for one read, in s.
    deadline : float
        The longest the whole fetch may take, in s.

    Returns
    -------
    list of Fetched
        One per file of the dataset, in its order, saying whether it was downloaded, copied or already present.

    Raises
    ------
    DatasetError
        A source of an unsupported scheme, or a ``dest`` that cannot be created.
    FetchError
        A file that could not be fetched or does not match its hash; ``fetched`` holds those kept.
    """
    dataset = dataset or PAPER
    dest = (dest or cache_dir() / "graphs" / dataset.name).expanduser()
    base = source or dataset.source
    _check_scheme(base)
    created = _first_missing(dest)
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        _remove_created(dest, created)
        raise DatasetError(f"cannot create the folder {dest}: {exc.strerror or exc}; "
                           "choose another with -o or $REMAT_BENCH_CACHE") from None
    end = time.monotonic() + deadline
    done: list[Fetched] = []
    try:
        for f in dataset.files:
            target = dest / f.name
            if target.is_file() and sha256_of(target) == f.sha256:
                done.append(Fetched(f.name, target, "present", str(target)))
                continue
            origin = _fetch_one(f, base, target, progress, timeout, end, deadline)
            done.append(Fetched(f.name, target, "copied" if _is_folder(base) else "downloaded", origin))
    except _Failed as failed:
        if not done:
            _remove_created(dest, created)
        kept = ("nothing was saved" if not done else
                f"it was not saved; the {_files(len(done))} before it {'are' if len(done) > 1 else 'is'} in {dest}")
        raise FetchError(f"{failed.what}; {kept}: {failed.hint}", done) from None
    except BaseException:  # Ctrl-C: the same clean-up
        if not done:
            _remove_created(dest, created)
        raise
    return done


def _files(n: int) -> str:
    return f"{n} file{'s' if n != 1 else ''}"


def _check_scheme(base: str) -> None:
    if _is_folder(base):
        return
    scheme = urllib.parse.urlsplit(base).scheme.lower()
    if scheme not in SCHEMES:
        raise DatasetError(f"cannot fetch from {base}: {scheme or 'that'}:// is not supported; give --source an "
                           "http:// or https:// URL, a file:// URL, or a local folder")


def _first_missing(folder: Path) -> Path | None:
    """The outermost folder of ``folder``'s path that does not exist yet: what ``mkdir -p`` creates."""
    missing = None
    for path in (folder, *folder.parents):
        if path.exists() or path.is_symlink():
            break
        missing = path
    return missing


def _remove_created(folder: Path, created: Path | None) -> None:
    """Remove the empty folders from ``folder`` up to ``created``, those a failed fetch made."""
    if created is None:
        return
    for path in (folder, *folder.parents):
        try:
            path.rmdir()  # only an empty folder: a file someone put there meanwhile stays
        except OSError:
            return
        if path == created:
            return


def _is_folder(base: str) -> bool:
    return "://" not in base


def _one_line(text: object) -> str:
    """An error's text on one line (urllib's redirect and HTTP reasons may hold several)."""
    return " ".join(str(text).split())


def _candidates(f: PublishedFile, base: str) -> list[str]:
    if _is_folder(base):
        folder = Path(base).expanduser()
        return [str(folder / f.original), str(folder / f.name)]
    root = base.rstrip("/")
    return [f"{root}/{urllib.parse.quote(f.original)}", f"{root}/{urllib.parse.quote(f.name)}"]


def _late(f: PublishedFile, location: str, received: int, deadline: float) -> _Failed:
    return _Failed(f"downloading {f.name} from {location} had not ended when the fetch's time limit of "
                   f"{deadline:g} s ran out ({received:,} of {f.size:,} bytes arrived)",
                   "the source is slow or stalled: run the fetch again, or give --deadline more seconds")


def _fetch_one(f: PublishedFile, base: str, target: Path, progress: Progress | None, timeout: float,
               end: float, deadline: float) -> str:
    """Copy or download one file to ``target`` through a checked temporary file; return where it came from."""
    tried = []
    for location in _candidates(f, base):
        left = end - time.monotonic()
        if left <= 0:
            raise _late(f, location, 0, deadline)
        try:
            stream = (open(location, "rb") if _is_folder(base)  # noqa: SIM115
                      else urllib.request.urlopen(location, timeout=min(timeout, left)))
        except FileNotFoundError:
            tried.append(location)
            continue
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                tried.append(location)
                continue
            if 300 <= exc.code < 400:  # urllib gives up on a loop, or after 10 redirects
                raise _Failed(f"{location} redirects in a loop (HTTP {exc.code}, followed until it repeated)",
                              "give --source the address that serves the files") from None
            raise _Failed(f"downloading {f.name} from {location} failed: HTTP {exc.code} {_one_line(exc.reason)}",
                          "try again later, or give --source a mirror or a local copy") from None
        except http.client.HTTPException as exc:  # a garbage status line, a connection closed before one
            raise _Failed(f"{location} did not answer as an HTTP server does ({type(exc).__name__}: "
                          f"{_one_line(exc) or 'no answer'})",
                          "check the address given to --source") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", None) or exc
            if isinstance(reason, TimeoutError) and time.monotonic() >= end:
                raise _late(f, location, 0, deadline) from None
            raise _Failed(f"cannot reach {location}: {_one_line(reason)}", "check the network, or give --source "
                          "a mirror URL or a local folder holding the files") from None
        with stream:
            _write_checked(f, stream, location, target, progress, timeout, end, deadline)
        return location
    raise _Failed(f"{f.name} is not at the source (tried {' and '.join(tried)})",
                  "give --source the folder or base URL that holds the published files")


def _write_checked(f: PublishedFile, stream: Any, location: str, target: Path, progress: Progress | None,
                   timeout: float, end: float, deadline: float) -> None:
    digest = hashlib.sha256()
    received = 0
    tmp_path = target.parent / f".{f.name}.{secrets.token_hex(6)}.part"
    try:
        # Created like any file (0666 less the umask), not private as tempfile's are: the cache is read by others.
        fd = os.open(tmp_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as exc:
        raise _Failed(f"cannot write in {target.parent}: {exc.strerror or exc}",
                      "choose another folder with -o or $REMAT_BENCH_CACHE") from None
    # read1: whatever has arrived, so that the deadline is checked between blocks of a slow source.
    read = getattr(stream, "read1", stream.read)
    try:
        with os.fdopen(fd, "wb") as tmp:
            while True:
                if time.monotonic() >= end:
                    raise _late(f, location, received, deadline)
                try:
                    block = read(min(1 << 16, f.size + 1 - received))  # at most one byte past the pinned size
                except TimeoutError:
                    if time.monotonic() >= end:
                        raise _late(f, location, received, deadline) from None
                    raise _Failed(f"{location} sent nothing for {timeout:g} s after {received:,} of {f.size:,} "
                                  f"bytes of {f.name}", "run the fetch again") from None
                except (http.client.HTTPException, OSError) as exc:  # the connection broke off
                    raise _Failed(f"downloading {f.name} from {location} broke off after {received:,} of "
                                  f"{f.size:,} bytes ({type(exc).__name__})", "run the fetch again") from None
                if not block:
                    break
                digest.update(block)
                tmp.write(block)
                received += len(block)
                if received > f.size:
                    raise _Failed(f"{location} sends more than the {f.size:,} bytes of {f.name}",
                                  "the source serves other bytes than the published file; give --source a "
                                  "mirror or a local copy")
                if progress:
                    progress(f.name, received, f.size)
            tmp.flush()
            os.fsync(tmp.fileno())
        announced = getattr(stream, "headers", None) and stream.headers.get("Content-Length")
        if announced and announced.isdigit() and received < int(announced):
            raise _Failed(f"downloading {f.name} from {location} broke off after {received:,} of "
                          f"{int(announced):,} bytes", "run the fetch again")
        if digest.hexdigest() != f.sha256:
            raise _Failed(
                f"{f.name} from {location} does not match its pinned SHA-256 (got {digest.hexdigest()[:16]}..., "
                f"{received:,} bytes; expected {f.sha256[:16]}..., {f.size:,} bytes)",
                "the source serves other bytes than the published file; give --source a mirror or a local copy")
        os.replace(tmp_path, target)
    except OSError as exc:  # a full disk, a folder made read-only meanwhile
        raise _Failed(f"saving {target} failed: {exc.strerror or exc}",
                      "free some space, or choose another folder with -o or $REMAT_BENCH_CACHE") from None
    finally:
        with contextlib.suppress(OSError):
            tmp_path.unlink()


__all__ = ["DATASETS", "DEADLINE_S", "FETCH_HINT", "PAPER", "PREFIX", "Dataset", "DatasetError", "FetchError",
           "Fetched", "PublishedFile", "cache_dir", "fetch", "find", "locate", "matching", "missing", "resolve",
           "search_path"]
