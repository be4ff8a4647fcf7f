"""review14: the remote cache's bound under long reads, and an endpoint that never answers."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from remote_helpers import cache_bytes, make_folder, put_bytes, upload

import tokembed
from tokembed.storage.cache import FolderBlocks

pytestmark = pytest.mark.slow  # a server round trip per block

BLOCK = 4096


def test_a_long_read_of_a_remote_split_keeps_the_cache_within_its_bound(tmp_path, s3, monkeypatch):
    """``RemoteShardSet.read`` (a validation split read whole, ``tokens(i)`` for export and counts) held every block
    of the range in use until the whole range was copied: a cache of 16 KiB grew to the whole split on disk."""
    local = tmp_path / "local"
    make_folder(local, n_tokens=60_000, n_shards=2, block_bytes=BLOCK)
    url = s3.url("long")
    upload(local, url)
    bound = 4 * BLOCK
    ss = tokembed.open_shards(url, cache_dir=s3.cache, cache_bytes=bound)
    seen: list[int] = []
    fill = FolderBlocks._fill

    def measuring(self, *args, **kwargs):
        fill(self, *args, **kwargs)
        seen.append(cache_bytes(s3.cache))

    monkeypatch.setattr(FolderBlocks, "_fill", measuring)
    want = tokembed.open_shards(local)
    assert np.array_equal(ss.read(0, ss.n_tokens), want.read(0, want.n_tokens))
    assert np.array_equal(ss.tokens(1), want.tokens(1))
    assert len(seen) > 2 * bound // BLOCK  # the split is much larger than the cache
    # the bound plus the blocks in use: the one being copied and the one just fetched
    assert max(seen) <= bound + 2 * BLOCK, f"the cache held {max(seen)} bytes, bound {bound}"
    assert cache_bytes(s3.cache) <= bound + 2 * BLOCK


SILENT_SERVER = """
import os, socket, sys, threading, time
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(64)
held = []  # accepted, never answered


def accept():
    while True:
        held.append(srv.accept()[0])


threading.Thread(target=accept, daemon=True).start()
os.environ["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{srv.getsockname()[1]}"
import tokembed

t = time.monotonic()
try:
    tokembed.open_shards("s3://bucket/data", storage_options={"config_kwargs": {"read_timeout": 2, "connect_timeout": 2}})
except Exception as e:
    print("ERROR", type(e).__name__, e)
print("SECONDS", time.monotonic() - t, "CONNECTIONS", len(held))
"""


def test_an_endpoint_that_never_answers_fails_after_tokembeds_retries_not_the_clients_nested_ones(tmp_path):
    """A server that accepts connections and never answers: with TOKEMBED_RETRIES=2 and a read timeout of 2 s,
    opening a folder took minutes (s3fs retries each request 5 times, inside a 5-times retry of its own read, and
    botocore 5 times inside each: 50 connections per tokembed attempt), the documented retries meaning nothing."""
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": "review14-key",
        "AWS_SECRET_ACCESS_KEY": "review14-secret",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "TOKEMBED_CACHE_DIR": str(tmp_path / "cache"),
        "TOKEMBED_RETRIES": "2",
        "TOKEMBED_RETRY_WAIT": "0.1",
    }
    try:
        out = subprocess.run([sys.executable, "-c", SILENT_SERVER], env=env, capture_output=True, text=True, timeout=90)
    except subprocess.TimeoutExpired:
        pytest.fail("opening a folder at a silent endpoint still had no answer after 90 s (2 retries of 2 s)")
    assert "ERROR RemoteError" in out.stdout, out.stdout + out.stderr
    assert "s3://bucket/data/manifest.json failed 2 times" in out.stdout
    assert "review14-secret" not in out.stdout + out.stderr
    seconds = float(out.stdout.split("SECONDS ")[1].split()[0])
    connections = int(out.stdout.split("CONNECTIONS ")[1].split()[0])
    assert seconds < 30 and connections <= 2 * 2, out.stdout


def test_concurrent_readers_of_a_cache_smaller_than_one_block_all_get_their_tokens(tmp_path, s3):
    """A cache smaller than one block admits a block that is needed anyway (docs/remote.md); but with several
    readers, another reader's admission evicted a block between its fetch and its pin, and after four such losses
    ``pin`` raised "the block was evicted four times before use": a failed read, not a slower one."""
    local = tmp_path / "local"
    make_folder(local, n_tokens=30_000, n_shards=2, block_bytes=1024)
    url = s3.url("tiny")
    upload(local, url)
    want = tokembed.open_shards(local)
    want = want.read(0, want.n_tokens)
    errors: list[str] = []

    def run(seed: int) -> None:
        ss = tokembed.open_shards(url, cache_dir=s3.cache, cache_bytes=1)
        rng = np.random.default_rng(seed)
        for _ in range(150):
            a = int(rng.integers(0, ss.n_tokens - 2000))
            try:
                assert np.array_equal(ss.read(a, a + 2000), want[a : a + 2000])
            except Exception as e:  # noqa: BLE001 (reported below)
                errors.append(repr(e))
                return

    threads = [threading.Thread(target=run, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_rerunning_a_finished_prepare_after_a_remote_input_changed_prepares_it_again(s3, tmp_path):
    """A local input edited in place (same size) is seen by a rerun of a finished prepare (its modification time),
    which prepares it again; a remote input was recorded with no time, so the rerun kept the shards of the old
    bytes: the folder silently no longer matched its inputs."""
    url = f"{s3.url('in')}/story.txt"
    old = ("I HAD always thought Jack Gisburn rather a cheap genius. " * 40).encode()
    new = old.replace(b"cheap", b"great")
    assert len(new) == len(old)
    put_bytes(url, old)
    tokembed.prepare_corpus([url], tmp_path / "r", shard_mb=0.01)
    time.sleep(1.1)  # S3 gives an object's time in whole seconds
    put_bytes(url, new)
    got = tokembed.prepare_corpus([url], tmp_path / "r", shard_mb=0.01)
    (tmp_path / "story.txt").write_bytes(new)
    want = tokembed.prepare_corpus([tmp_path / "story.txt"], tmp_path / "l", shard_mb=0.01)
    a, b = tokembed.open_shards(got.out), tokembed.open_shards(want.out)
    assert a.n_tokens == b.n_tokens and np.array_equal(a.read(0, a.n_tokens), b.read(0, b.n_tokens))
