"""`remat_bench.app.datasets` and `remat-bench graphs fetch`: published graphs found and fetched.

The downloads run against real HTTP servers on 127.0.0.1: one serving a
folder, one that corrupts what it serves, one that breaks off mid-file. The
dataset fetched is either a small one built here from shipped graphs (with
their hashes pinned by the test), so these tests run on a fresh clone, or,
when the published graphs are on this machine, the real one.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import os
import shutil
import stat
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner

from remat_bench.app import datasets
from remat_bench.app.cli import main
from remat_bench.app.datasets import Dataset, DatasetError, PublishedFile
from remat_bench.core.graph_io import load_graph
from tests.helpers import SHIPPED, paper_graph

SMALL = ("chain-16-train.json", "kumar-figure1.json")


def small_dataset(base: str = "http://127.0.0.1:9/none") -> Dataset:
    """Two shipped graphs as a dataset, each under an 'original' name with spaces and brackets."""
    files = []
    for name in SMALL:
        data = (SHIPPED / name).read_bytes()
        files.append(PublishedFile(name, f"Original ({name.removesuffix('.json')})_nx.json",
                                   hashlib.sha256(data).hexdigest(), len(data)))
    return Dataset("paper", "two shipped graphs", base, tuple(files))


def source_folder(tmp_path: Path, dataset: Dataset, original_names: bool = True) -> Path:
    folder = tmp_path / "source"
    folder.mkdir(parents=True)
    for f in dataset.files:
        src = SHIPPED / f.name if f.name in SMALL else paper_graph(f.name.removesuffix(".json"))
        shutil.copyfile(src, folder / (f.original if original_names else f.name))
    return folder


class Handler(http.server.SimpleHTTPRequestHandler):
    mode = "serve"  # or "corrupt" (one byte changed) or "truncate" (half the file, then close)
    requests: list[str]

    def log_message(self, *args) -> None:  # keep pytest's output clean
        pass

    def do_GET(self) -> None:
        self.requests.append(self.path)
        if self.mode == "serve":
            return super().do_GET()
        path = Path(self.translate_path(self.path))
        if not path.is_file():
            return self.send_error(404)
        data = bytearray(path.read_bytes())
        length = len(data)
        if self.mode == "corrupt":
            data[len(data) // 2] ^= 0xFF
        else:
            data = data[: len(data) // 2]
        self.send_response(200)
        self.send_header("Content-Length", str(length))
        self.end_headers()
        self.wfile.write(bytes(data))
        self.close_connection = True


@contextmanager
def server(folder: Path, mode: str = "serve") -> Iterator[tuple[str, list[str]]]:
    requests: list[str] = []
    handler = type("H", (Handler,), {"mode": mode, "requests": requests})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                            functools.partial(handler, directory=str(folder)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/data", requests
    finally:
        httpd.shutdown()
        httpd.server_close()


def serve_at_data(folder: Path) -> Path:
    """The server's root, with ``folder`` as its ``data/`` (as the source repository lays it out)."""
    root = folder.parent / "www"
    root.mkdir()
    shutil.move(str(folder), root / "data")
    return root


def isolate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No PAPER_GRAPHS, no ../shared beside the checkout, an empty cache: a fresh clone's machine."""
    monkeypatch.delenv("PAPER_GRAPHS", raising=False)
    monkeypatch.setattr(datasets, "CHECKOUT", tmp_path / "clone" / "remat-bench")
    cache = tmp_path / "cache"
    monkeypatch.setenv("REMAT_BENCH_CACHE", str(cache))
    return cache


@pytest.fixture
def isolated(tmp_path, monkeypatch) -> Path:
    return isolate(tmp_path, monkeypatch)


def listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_fetch_from_a_local_http_server_checks_every_hash_and_keeps_what_is_there(tmp_path, isolated):
    data = small_dataset()
    root = serve_at_data(source_folder(tmp_path, data))
    with server(root) as (url, requests):
        fetched = datasets.fetch(data, source=url)
        assert [f.action for f in fetched] == ["downloaded", "downloaded"]
        # The original names are quoted in the URL (spaces, brackets).
        assert requests == ["/data/Original%20%28chain-16-train%29_nx.json",
                            "/data/Original%20%28kumar-figure1%29_nx.json"]
        dest = isolated / "graphs" / "paper"
        assert listing(dest) == sorted(SMALL)  # no temporary file left
        for name in SMALL:
            assert (dest / name).read_bytes() == (SHIPPED / name).read_bytes()
        again = datasets.fetch(data, source=url)
        assert [f.action for f in again] == ["present", "present"] and len(requests) == 2


def test_a_mirror_under_the_names_used_here_and_a_local_folder_also_serve(tmp_path, isolated):
    data = small_dataset()
    root = serve_at_data(source_folder(tmp_path, data, original_names=False))
    with server(root) as (url, requests):
        fetched = datasets.fetch(data, tmp_path / "out", source=url)
    assert [f.action for f in fetched] == ["downloaded", "downloaded"]
    assert len(requests) == 4  # the original name (404), then the name here
    copied = datasets.fetch(data, tmp_path / "copy", source=str(root / "data"))
    assert [f.action for f in copied] == ["copied", "copied"]
    assert listing(tmp_path / "copy") == sorted(SMALL)


def test_a_corrupted_or_broken_download_leaves_nothing_that_looks_complete(tmp_path, isolated):
    data = small_dataset()
    root = serve_at_data(source_folder(tmp_path, data))
    dest = tmp_path / "out"
    with server(root, "corrupt") as (url, _), pytest.raises(DatasetError) as corrupt:
        datasets.fetch(data, dest, source=url)
    assert "does not match its pinned SHA-256" in str(corrupt.value) and "nothing was saved" in str(corrupt.value)
    assert listing(dest) == []
    with server(root, "truncate") as (url, _), pytest.raises(DatasetError, match="broke off after"):
        datasets.fetch(data, dest, source=url)
    assert listing(dest) == []
    # A file already in place with other bytes is replaced only by bytes that match.
    dest.mkdir(exist_ok=True)
    (dest / SMALL[0]).write_text("{}")
    with server(root, "corrupt") as (url, _), pytest.raises(DatasetError):
        datasets.fetch(data, dest, source=url)
    assert (dest / SMALL[0]).read_text() == "{}"
    with server(root) as (url, _):
        datasets.fetch(data, dest, source=url)
    assert (dest / SMALL[0]).read_bytes() == (SHIPPED / SMALL[0]).read_bytes()


def test_unreachable_or_incomplete_sources_are_one_sentence(tmp_path, isolated):
    data = small_dataset()
    with pytest.raises(DatasetError, match=r"cannot reach http://127\.0\.0\.1:9/.*give --source"):
        datasets.fetch(data, tmp_path / "out", source="http://127.0.0.1:9/data", timeout=5)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError, match=r"chain-16-train\.json is not at the source"):
        datasets.fetch(data, tmp_path / "out", source=str(tmp_path / "empty"))
    assert listing(tmp_path / "out") == []


def test_cli_fetch_then_paper_names_resolve_from_the_cache(tmp_path, isolated, monkeypatch):
    data = small_dataset()
    monkeypatch.setattr(datasets, "PAPER", data)
    monkeypatch.setitem(datasets.DATASETS, "paper", data)
    root = serve_at_data(source_folder(tmp_path, data))
    r = CliRunner().invoke(main, ["graphs", "show", "paper:chain-16-train", "--json"])
    assert r.exit_code == 2 and "not on this machine" in r.output and "graphs fetch paper" in r.output
    with server(root) as (url, _):
        r = CliRunner().invoke(main, ["graphs", "fetch", "paper", "--source", url])
    assert r.exit_code == 0, r.output
    assert r.output.count("downloaded") == 2 and "sha256 ok" in r.output
    r = CliRunner().invoke(main, ["graphs", "show", "paper:chain-16-train", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["name"] == load_graph(SHIPPED / "chain-16-train.json").name
    listed = json.loads(CliRunner().invoke(main, ["graphs", "list", "--json"]).output)
    assert {"paper:chain-16-train", "paper:kumar-figure1"} <= {row["graph"] for row in listed if "error" not in row}
    # A corrupted source: one sentence, exit 2, nothing new in the cache.
    other = tmp_path / "other"
    with server(root, "corrupt") as (url, _):
        r = CliRunner().invoke(main, ["graphs", "fetch", "paper", "--source", url, "-o", str(other)])
    assert r.exit_code == 2 and "does not match its pinned SHA-256" in r.output
    assert "Traceback" not in r.output and listing(other) == []


def test_the_search_order_is_paper_graphs_then_shared_beside_the_checkout_then_the_cache(tmp_path, isolated,
                                                                                      monkeypatch):
    data = small_dataset()
    monkeypatch.setattr(datasets, "PAPER", data)
    name = SMALL[0].removesuffix(".json")
    assert datasets.find(name, data) is None and datasets.missing(data) == list(SMALL)
    folders = {"cache": isolated / "graphs" / "paper", "shared": tmp_path / "clone" / "shared" / "graphs" / "paper",
               "env": tmp_path / "env"}
    found = []
    for key in ("cache", "shared", "env"):
        folders[key].mkdir(parents=True)
        shutil.copyfile(SHIPPED / SMALL[0], folders[key] / SMALL[0])
        if key == "env":
            monkeypatch.setenv("PAPER_GRAPHS", str(folders[key]))
        found.append(datasets.find(name, data))
    assert found == [folders[k] / SMALL[0] for k in ("cache", "shared", "env")]
    assert datasets.missing(data) == [SMALL[1]]
    with pytest.raises(DatasetError, match="'paper:nosuch' is not one of the published graphs"):
        datasets.find("nosuch", data)


def test_the_pinned_hashes_are_those_of_the_published_files():
    # Needs the real files: skipped (or, under CI=true, failed at start) when they are not here.
    for f in datasets.PAPER.files:
        path = paper_graph(f.name.removesuffix(".json"))
        assert datasets.sha256_of(path) == f.sha256 and path.stat().st_size == f.size


def test_the_real_dataset_fetched_from_a_local_server(tmp_path, monkeypatch):
    root = serve_at_data(source_folder(tmp_path, datasets.PAPER))  # the published files, from where they are
    isolated = isolate(tmp_path, monkeypatch)
    with server(root) as (url, requests):
        fetched = datasets.fetch(datasets.PAPER, source=url)
    assert [f.action for f in fetched] == ["downloaded"] * 7 and len(requests) == 7
    assert requests[4] == "/data/fcn_8_vgg%20%28MLSys%29_32_%28416%2C%20608%2C%203%29_train_nx.json"
    assert datasets.find("random_layered_n1000") == isolated / "graphs" / "paper" / "random_layered_n1000.json"
    assert datasets.PAPER.source.endswith("/haoming-codes/moccasin/4da8878932a0fb7edee4ef71ac8719dfdf5d9a07/data")


# ---------------------------------------------------------------------- hostile sources


class Hostile(http.server.BaseHTTPRequestHandler):
    """Serves the files of ``folder`` (by the last part of the path) misbehaving in one way, ``mode``:

    endless (a body that never ends), drip (one byte every 0.2 s), stall (the headers, then nothing),
    garbage (no HTTP status line), loop (a redirect to itself), second-corrupt (the second file changed).
    """

    mode = "endless"
    folder: Path
    stop: threading.Event
    served: list[str]

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        if self.mode == "garbage":
            self.wfile.write(b"HELLO garbage\r\n\r\n")
            return
        if self.mode == "loop":
            self.send_response(302)
            self.send_header("Location", self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        path = self.folder / urllib.parse.unquote(self.path.rsplit("/", 1)[-1])
        if not path.is_file():
            return self.send_error(404)
        data = bytearray(path.read_bytes())
        self.served.append(path.name)
        if self.mode == "second-corrupt" and len(self.served) == 2:
            data[len(data) // 2] ^= 0xFF
        self.send_response(200)
        if self.mode != "endless":
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.close_connection = True
        try:
            if self.mode == "endless":
                for _ in range(320):  # 20 MB, then give up: the client should have hung up long before
                    if self.stop.is_set():
                        break
                    self.wfile.write(b"x" * 65536)
            elif self.mode == "drip":
                for byte in data:
                    if self.stop.wait(0.2):
                        break
                    self.wfile.write(bytes([byte]))
            elif self.mode == "stall":
                self.stop.wait(30)
            else:
                self.wfile.write(bytes(data))
        except (BrokenPipeError, ConnectionResetError):  # the client hung up, as it should
            pass


@contextmanager
def hostile(folder: Path, mode: str) -> Iterator[str]:
    stop = threading.Event()
    handler = type("H", (Hostile,), {"mode": mode, "folder": folder, "stop": stop, "served": []})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/data"
    finally:
        stop.set()
        httpd.shutdown()
        httpd.server_close()


def first_url(url: str, data: Dataset) -> str:
    return f"{url}/{urllib.parse.quote(data.files[0].original)}"


def test_an_endless_body_is_cut_off_one_byte_past_the_pinned_size(tmp_path, isolated):
    data = small_dataset()
    size = data.files[0].size
    # The server gives up after 20 MB: a fetch that read on would end on the hash, not on the size.
    with hostile(source_folder(tmp_path, data), "endless") as url, pytest.raises(DatasetError) as failed:
        datasets.fetch(data, tmp_path / "out", source=url)
    assert str(failed.value) == (f"{first_url(url, data)} sends more than the {size:,} bytes of chain-16-train.json; "
                                 "nothing was saved: the source serves other bytes than the published file; give "
                                 "--source a mirror or a local copy")
    assert not (tmp_path / "out").exists()  # the folder the fetch created is gone with the partial file


@pytest.mark.parametrize("mode", ["drip", "stall"])
def test_a_source_that_drips_or_stalls_meets_the_deadline_of_the_whole_fetch(tmp_path, isolated, monkeypatch, mode):
    data = small_dataset()
    started = time.monotonic()
    with hostile(source_folder(tmp_path, data), mode) as url, pytest.raises(DatasetError) as failed:
        datasets.fetch(data, tmp_path / "out", source=url, deadline=1.0)
    assert time.monotonic() - started < 45  # it ended at all (a drip took 22 minutes, a stall 60 s per read)
    message = str(failed.value)
    assert message.startswith(f"downloading chain-16-train.json from {first_url(url, data)} had not ended when "
                              "the fetch's time limit of 1 s ran out (")
    assert message.endswith(f" of {data.files[0].size:,} bytes arrived); nothing was saved: the source is slow or "
                            "stalled: run the fetch again, or give --deadline more seconds")
    assert not (tmp_path / "out").exists()
    if mode == "stall":  # the command line sets the deadline too
        monkeypatch.setitem(datasets.DATASETS, "paper", data)
        with hostile(source_folder(tmp_path / "cli", data), mode) as url:
            r = CliRunner().invoke(main, ["graphs", "fetch", "paper", "--source", url, "--deadline", "0.5",
                                          "-o", str(tmp_path / "out")])
        assert r.exit_code == 2 and "Traceback" not in r.output
        assert "had not ended when the fetch's time limit of 0.5 s ran out" in " ".join(r.output.split())
        assert not (tmp_path / "out").exists()


def test_garbage_a_redirect_loop_and_an_ftp_url_are_one_sentence_each(tmp_path, isolated):
    data = small_dataset()
    folder = source_folder(tmp_path, data)
    out = tmp_path / "out"
    with hostile(folder, "garbage") as url, pytest.raises(DatasetError) as garbage:
        datasets.fetch(data, out, source=url)
    assert str(garbage.value) == (f"{first_url(url, data)} did not answer as an HTTP server does (BadStatusLine: "
                                  "HELLO garbage); nothing was saved: check the address given to --source")
    with hostile(folder, "loop") as url, pytest.raises(DatasetError) as loop:
        datasets.fetch(data, out, source=url)
    assert str(loop.value) == (f"{first_url(url, data)} redirects in a loop (HTTP 302, followed until it "
                               "repeated); nothing was saved: give --source the address that serves the files")
    # ftp:// at an HTTP port waited for an FTP greeting that never comes: refused before connecting.
    with hostile(folder, "stall") as url:
        ftp = url.replace("http://", "ftp://")
        r = CliRunner().invoke(main, ["graphs", "fetch", "paper", "--source", ftp, "-o", str(out)])
    assert r.exit_code == 2 and "Traceback" not in r.output
    text = " ".join(r.output.split())
    assert text[text.index("error: "):] == (
        f"error: cannot fetch from {ftp}: ftp:// is not supported; give --source an http:// or https:// URL, a "
        "file:// URL, or a local folder")
    assert not out.exists()


def test_a_fetch_that_fails_part_way_keeps_and_lists_the_files_that_arrived(tmp_path, isolated, monkeypatch):
    data = small_dataset()
    monkeypatch.setitem(datasets.DATASETS, "paper", data)
    dest = tmp_path / "out"
    with hostile(source_folder(tmp_path, data), "second-corrupt") as url:
        r = CliRunner().invoke(main, ["graphs", "fetch", "paper", "--source", url, "-o", str(dest)])
    assert r.exit_code == 2 and "Traceback" not in r.output
    text = " ".join(r.output.split())
    assert f"downloaded {dest / SMALL[0]} (sha256 ok, from {first_url(url, data)})" in text
    assert "nothing was saved" not in text
    assert ("does not match its pinned SHA-256 (got" in text
            and text.endswith(f"it was not saved; the 1 file before it is in {dest}: the source serves other bytes "
                              "than the published file; give --source a mirror or a local copy"))
    assert listing(dest) == [SMALL[0]]


@pytest.mark.parametrize("umask", [0o022, 0o027], ids=["umask-022", "umask-027"])
def test_fetched_files_are_readable_like_any_file_the_user_writes(tmp_path, isolated, umask):
    data = small_dataset()
    root = serve_at_data(source_folder(tmp_path, data))
    previous = os.umask(umask)
    try:
        with server(root) as (url, _):
            fetched = datasets.fetch(data, tmp_path / "out", source=url)
        copied = datasets.fetch(data, tmp_path / "copy", source=str(root / "data"))
    finally:
        os.umask(previous)
    for f in [*fetched, *copied]:
        assert stat.S_IMODE(f.path.stat().st_mode) == 0o666 & ~umask, f.path


@pytest.fixture
def tiny_fs(tmp_path) -> Iterator[Path]:
    """A real filesystem of 4 KiB (tmpfs), too small for the first file of the small dataset."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4k", "tmpfs", str(mnt)], capture_output=True,
                             text=True, check=False)
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_a_fetch_into_a_full_filesystem_leaves_no_folder_behind(tmp_path, isolated, tiny_fs):
    data = small_dataset()
    dest = tiny_fs / "cache" / "graphs" / "paper"
    source = str(source_folder(tmp_path, data))
    with pytest.raises(DatasetError) as failed:
        datasets.fetch(data, dest, source=source)
    assert str(failed.value) == (f"saving {dest / SMALL[0]} failed: No space left on device; nothing was saved: "
                                 "free some space, or choose another folder with -o or $REMAT_BENCH_CACHE")
    assert listing(tiny_fs) == []  # cache/graphs/paper, made by the fetch, removed
    # A folder that was there before stays.
    (tiny_fs / "mine").mkdir()
    with pytest.raises(DatasetError):
        datasets.fetch(data, tiny_fs / "mine", source=source)
    assert listing(tiny_fs) == ["mine"] and listing(tiny_fs / "mine") == []
