"""`prepare` reading inputs from a bucket and writing shards to one: the same bytes as a local prepare, a
manifest uploaded last, and a rerun after kill -9 that keeps what was verified."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from remote_helpers import put_bytes

import tokembed
from tokembed.storage.stores import open_store

pytestmark = pytest.mark.slow


def _corpus(story: str) -> dict[str, bytes]:
    """One input of each kind: text, JSON Lines, gzip, zstd, Parquet (several row groups)."""
    paras = [p for p in story.split("\n\n") if p.strip()]
    table = pa.table({"text": paras * 3})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, row_group_size=7)
    jsonl = "".join(json.dumps({"text": p}) + "\n" for p in paras).encode()
    return {
        "a/story.txt": story.encode(),
        "a/docs.jsonl": jsonl,
        "b/docs.jsonl.gz": gzip.compress(jsonl, mtime=0),
        "b/story.txt.zst": zstandard.ZstdCompressor().compress(story.encode()),
        "c/table.parquet": sink.getvalue().to_pybytes(),
    }


def _objects(url: str) -> dict[str, bytes]:
    store = open_store(url)
    return {k: store.read(k) for k in sorted(store.listing())}


def _files(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.name.startswith(".")
    }


def test_inputs_from_urls_give_the_local_shards(story, s3, tmp_path):
    corpus = _corpus(story)
    for name, data in corpus.items():
        put_bytes(f"{s3.url('in')}/{name}", data)
        (tmp_path / "in" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "in" / name).write_bytes(data)
    kw = dict(val_fraction=0.1, shard_mb=0.02, workers=2)
    remote = tokembed.prepare_corpus(
        [s3.url("in/a/"), f"{s3.url('in')}/b/*", s3.url("in/c/table.parquet")], tmp_path / "r", **kw
    )
    local = tokembed.prepare_corpus(
        [tmp_path / "in/a", tmp_path / "in/b", tmp_path / "in/c/table.parquet"], tmp_path / "l", **kw
    )
    assert [f["format"] for f in remote.manifest["inputs"]] == [f["format"] for f in local.manifest["inputs"]]
    assert {f["path"] for f in remote.manifest["inputs"]} == {f"{s3.url('in')}/{n}" for n in corpus}
    ra, la = tokembed.open_shards(tmp_path / "r"), tokembed.open_shards(tmp_path / "l")
    assert ra.n_tokens == la.n_tokens and (ra.read(0, ra.n_tokens) == la.read(0, la.n_tokens)).all()


def test_prepare_to_a_bucket_writes_the_local_bytes_manifest_last(story, s3, tmp_path):
    src = tmp_path / "story.txt"
    src.write_text(story * 3)
    kw = dict(val_fraction=0.1, shard_mb=0.01, workers=1)
    local = tokembed.prepare_corpus([src], tmp_path / "local", **kw)
    url = s3.url("out")
    remote = tokembed.prepare_corpus([src], url, **kw)
    assert remote.out == url and remote.manifest == local.manifest
    assert _objects(url) == _files(tmp_path / "local")
    assert tokembed.check_shards(url) == []
    assert not any((s3.cache / "prepare").iterdir())  # the staging folder is gone
    again = tokembed.prepare_corpus([src], url, **kw)  # nothing to do
    assert again.manifest == local.manifest


def test_a_killed_remote_prepare_resumes_to_the_same_bytes(story, s3, tmp_path):
    src = tmp_path / "big.txt"
    src.write_text((story + "\n\n") * 40)
    kw = dict(val_fraction=0.05, shard_mb=0.02, workers=1)
    local = tokembed.prepare_corpus([src], tmp_path / "local", **kw)
    n_files = len(_files(tmp_path / "local"))
    url = s3.url("killed")
    script = textwrap.dedent(
        f"""
        import tokembed
        tokembed.prepare_corpus([{str(src)!r}], {url!r}, val_fraction=0.05, shard_mb=0.02, workers=1)
        """
    )
    # Killed once while tokenizing (nothing uploaded yet), once in the middle of the upload (some objects, no
    # manifest): the folder reads as unfinished both times, and the rerun finishes it.
    for moment in ("tokenizing", "uploading"):
        p = subprocess.Popen([sys.executable, "-c", script], env=os.environ.copy())
        if moment == "tokenizing":
            time.sleep(2.0)
        else:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                objects = open_store(url).listing()
                if 0 < len(objects) < n_files and "manifest.json" not in objects:
                    break
                time.sleep(0.01)
            else:
                pytest.fail("the upload was never seen half done")
        p.send_signal(signal.SIGKILL)
        p.wait()
        assert "manifest.json" not in open_store(url).listing()
        with pytest.raises(FileNotFoundError, match=r"not a finished shard folder"):
            tokembed.open_shards(url)
    result = tokembed.prepare_corpus([src], url, **kw)
    assert result.manifest == local.manifest
    assert _objects(url) == _files(tmp_path / "local")
    assert tokembed.check_shards(url) == []


def test_uploads_refuse_another_folder_unless_overwrite(story, s3, tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text(story)
    b.write_text(story[::-1])
    url = s3.url("both")
    tokembed.prepare_corpus([a], url)
    with pytest.raises(FileExistsError, match=rf"{url} already holds another shard folder .*\(--overwrite\)"):
        tokembed.prepare_corpus([b], url)
    tokembed.prepare_corpus([b], url, overwrite=True)
    assert (
        tokembed.open_shards(url).n_tokens
        == tokembed.prepare_corpus([b], tmp_path / "lb").manifest["splits"]["train"]["tokens"]
    )
    assert tokembed.check_shards(url) == []
