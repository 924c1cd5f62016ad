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
The standard library's urllib does the download: the files are small (800 kB
in all) and a dependency for HTTP would buy nothing here.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

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
    """The folders a published graph is looked for in, in order."""
    dataset = dataset or PAPER
    folders = []
    if os.environ.get("PAPER_GRAPHS"):
        folders.append(Path(os.environ["PAPER_GRAPHS"]).expanduser())
    folders.append(CHECKOUT.parent / "shared" / "graphs" / dataset.name)
    folders.append(cache_dir() / "graphs" / dataset.name)
    return folders


def find(stem: str, dataset: Dataset | None = None) -> Path | None:
    """The path of one published graph (``random_layered_n100`` or its file name), or None."""
    dataset = dataset or PAPER
    f = dataset.file(stem)
    for folder in search_path(dataset):
        if (folder / f.name).is_file():
            return folder / f.name
    return None


def missing(dataset: Dataset | None = None) -> list[str]:
    """The file names of the dataset found in none of the folders of `search_path`."""
    dataset = dataset or PAPER
    return [f.name for f in dataset.files if find(f.name, dataset) is None]


def locate(stem: str, dataset: Dataset | None = None) -> Path:
    """Like `find`, but a graph that is not here is a DatasetError saying how to get it."""
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
    """The published graphs here whose names match a shell pattern (``random_layered_n*``)."""
    dataset = dataset or PAPER
    import fnmatch

    names = [f.name for f in dataset.files
             if fnmatch.fnmatchcase(f.name.removesuffix(".json"), pattern.removesuffix(".json"))]
    return [locate(name, dataset) for name in names]


def sha256_of(path: Path) -> str:
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


Progress = Callable[[str, int, int], None]  # (file name, bytes so far, bytes expected)


def fetch(dataset: Dataset | None = None, dest: Path | None = None, source: str | None = None,
          progress: Progress | None = None, timeout: float = 60.0) -> list[Fetched]:
    """Put every file of ``dataset`` in ``dest`` (default: the cache), each checked against its SHA-256.

    ``source`` is a base URL (``http(s)://``, ``file://``) or a local folder;
    each file is looked for there under its original name, then under its
    name here. A file already in ``dest`` with the right hash is kept. A
    download goes to a hidden temporary file in ``dest``, is hashed as it
    arrives and renamed into place only when the hash matches; a mismatch or
    a failed download is a DatasetError, and leaves nothing behind.
    """
    dataset = dataset or PAPER
    dest = (dest or cache_dir() / "graphs" / dataset.name).expanduser()
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DatasetError(f"cannot create the folder {dest}: {exc.strerror or exc}; "
                           "choose another with -o or $REMAT_BENCH_CACHE") from None
    base = source or dataset.source
    done = []
    for f in dataset.files:
        target = dest / f.name
        if target.is_file() and sha256_of(target) == f.sha256:
            done.append(Fetched(f.name, target, "present", str(target)))
            continue
        origin = _fetch_one(f, base, target, progress, timeout)
        done.append(Fetched(f.name, target, "copied" if _is_folder(base) else "downloaded", origin))
    return done


def _is_folder(base: str) -> bool:
    return "://" not in base


def _candidates(f: PublishedFile, base: str) -> list[str]:
    if _is_folder(base):
        folder = Path(base).expanduser()
        return [str(folder / f.original), str(folder / f.name)]
    root = base.rstrip("/")
    return [f"{root}/{urllib.parse.quote(f.original)}", f"{root}/{urllib.parse.quote(f.name)}"]


def _fetch_one(f: PublishedFile, base: str, target: Path, progress: Progress | None, timeout: float) -> str:
    """Copy or download one file to ``target`` through a checked temporary file; return where it came from."""
    tried = []
    for location in _candidates(f, base):
        try:
            stream = open(location, "rb") if _is_folder(base) else urllib.request.urlopen(location, timeout=timeout)  # noqa: SIM115
        except FileNotFoundError:
            tried.append(location)
            continue
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                tried.append(location)
                continue
            raise DatasetError(f"downloading {f.name} from {location} failed: HTTP {exc.code} {exc.reason}; "
                               "try again later, or give --source a mirror or a local copy") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise DatasetError(f"cannot reach {location}: {reason}; check the network, or give --source "
                               "a mirror URL or a local folder holding the files") from None
        with stream:
            _write_checked(f, stream, location, target, progress)
        return location
    raise DatasetError(f"{f.name} is not at the source (tried {' and '.join(tried)}); "
                       "give --source the folder or base URL that holds the published files")


def _write_checked(f: PublishedFile, stream, location: str, target: Path, progress: Progress | None) -> None:
    digest = hashlib.sha256()
    received = 0
    try:
        tmp = tempfile.NamedTemporaryFile(dir=target.parent, prefix=f".{f.name}.", suffix=".part", delete=False)  # noqa: SIM115
    except OSError as exc:
        raise DatasetError(f"cannot write in {target.parent}: {exc.strerror or exc}; "
                           "choose another folder with -o or $REMAT_BENCH_CACHE") from None
    tmp_path = Path(tmp.name)
    try:
        with tmp:
            while True:
                try:
                    block = stream.read(1 << 16)
                except (http.client.HTTPException, OSError) as exc:  # the connection broke off
                    raise DatasetError(
                        f"downloading {f.name} from {location} broke off after {received:,} of {f.size:,} "
                        f"bytes ({type(exc).__name__}); nothing was saved: run the fetch again") from None
                if not block:
                    break
                digest.update(block)
                tmp.write(block)
                received += len(block)
                if progress:
                    progress(f.name, received, f.size)
            tmp.flush()
            os.fsync(tmp.fileno())
        announced = getattr(stream, "headers", None) and stream.headers.get("Content-Length")
        if announced and announced.isdigit() and received < int(announced):
            raise DatasetError(
                f"downloading {f.name} from {location} broke off after {received:,} of {int(announced):,} "
                "bytes; nothing was saved: run the fetch again")
        if digest.hexdigest() != f.sha256:
            raise DatasetError(
                f"{f.name} from {location} does not match its pinned SHA-256 (got {digest.hexdigest()[:16]}..., "
                f"{received:,} bytes; expected {f.sha256[:16]}..., {f.size:,} bytes): the source serves other "
                "bytes than the published file; nothing was saved"
            )
        os.replace(tmp_path, target)
    except OSError as exc:
        raise DatasetError(f"saving {target} failed: {exc.strerror or exc}; nothing was saved") from None
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


__all__ = ["DATASETS", "FETCH_HINT", "PAPER", "PREFIX", "Dataset", "DatasetError", "Fetched", "PublishedFile",
           "cache_dir", "fetch", "find", "locate", "matching", "missing", "resolve", "search_path"]
