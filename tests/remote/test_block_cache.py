"""The block cache against definitions: Belady's and LRU's evictions on recorded traces, the bound, one fetch per
block per machine, crashes that never leave a block used unverified, versions that never mix."""

from __future__ import annotations

import hashlib
import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from remote_helpers import cache_bytes, make_folder, upload

import tokembed
from tokembed.data.shuffle import FeistelPermutation

pytestmark = pytest.mark.slow

BLOCK = 1024  # bytes: 512 tokens
T = 127  # windows of 128 tokens: four per block, never across one (shards are cut at multiples of 512 tokens)


def belady_fetches(trace: list[int], size: dict[int, int], capacity: int) -> list[int]:
    """Blocks fetched by a cache of ``capacity`` bytes that, on a miss, evicts the cached block whose next use lies
    furthest in the future (never used again: furthest of all) until the new one fits. From the definition."""
    cache: set[int] = set()
    fetched = []
    for i, b in enumerate(trace):
        if b in cache:
            continue
        fetched.append(b)

        def next_use(x: int, now: int = i) -> float:
            return next((j for j in range(now + 1, len(trace)) if trace[j] == x), math.inf)

        while cache and sum(size[x] for x in cache) + size[b] > capacity:
            cache.remove(max(sorted(cache), key=next_use))
        cache.add(b)
    return fetched


def lru_fetches(trace: list[int], size: dict[int, int], capacity: int) -> list[int]:
    """The same cache evicting the least recently used block instead."""
    last: dict[int, int] = {}
    fetched = []
    for i, b in enumerate(trace):
        if b not in last:
            fetched.append(b)
            while last and sum(size[x] for x in last) + size[b] > capacity:
                del last[min(last, key=last.__getitem__)]
        last[b] = i
    return fetched


@pytest.fixture
def folder(tmp_path, s3):
    local = tmp_path / "local"
    make_folder(local, n_tokens=40_000, n_shards=4, block_bytes=BLOCK, align=512)
    url = s3.url("cache")
    upload(local, url)
    return local, url


def _trace(local: Path, seed: int) -> tuple[list[int], dict[int, int]]:
    """The global 512-token chunk each window of the loader's order reads (B=1, shuffled by its permutation)."""
    n_tokens = tokembed.open_shards(local).n_tokens
    n = len(tokembed.SlidingWindowDataset(local, max_length=T, stride=T + 1))
    order = FeistelPermutation(n, seed=seed, epoch=0)(np.arange(n))
    trace = ((order * (T + 1)) // 512).tolist()
    size = {c: min(BLOCK, (n_tokens - c * 512) * 2) for c in set(trace)}
    return trace, size


def _fetched(log: Path, local: Path) -> list[int]:
    """The chunks the cache fetched, in order, from its log (``version key block bytes pid``)."""
    ss = tokembed.open_shards(local)
    first = {s.tokens: int(c) // 512 for s, c in zip(ss.shards, ss.cumulative)}
    out = []
    for line in log.read_text().splitlines():
        _, key, block, _, _ = line.split()
        if key.endswith(".bin"):
            out.append(first[key] + int(block))
    return out


def _read_epoch(url: str, seed: int, cache: str, **kw) -> list[torch.Tensor]:
    loader = tokembed.create_dataloader(
        url, batch_size=1, max_length=T, stride=T + 1, seed=seed, cache_bytes=cache, **kw
    )
    return [x.clone() for x, _ in loader]


@pytest.mark.parametrize("policy, reference", [("belady", belady_fetches), ("lru", lru_fetches)])
def test_evictions_follow_the_definition_on_the_loaders_trace(folder, tmp_path, monkeypatch, policy, reference):
    local, url = folder
    log = tmp_path / "fetch.log"
    monkeypatch.setenv("TOKEMBED_CACHE_LOG", str(log))
    monkeypatch.setenv("TOKEMBED_PREFETCH_THREADS", "0")  # demand fetches only: the definition's setting
    monkeypatch.setenv("TOKEMBED_CACHE_POLICY", policy)
    trace, size = _trace(local, seed=11)
    got = _read_epoch(url, 11, f"{12 * BLOCK}")
    want = _read_epoch(str(local), 11, f"{12 * BLOCK}")
    assert all(torch.equal(a, b) for a, b in zip(got, want)) and len(got) == len(trace)
    fetched = _fetched(log, local)
    assert fetched == reference(trace, size, 12 * BLOCK)
    assert len(set(trace)) < len(fetched) < len(trace)  # the cache mattered: it evicted, and it hit


def test_belady_fetches_less_than_lru_with_and_without_prefetch(folder, tmp_path, monkeypatch):
    local, url = folder
    trace, size = _trace(local, seed=3)
    counts = {}
    for name, policy, threads in (("belady", "belady", "0"), ("prefetch", "belady", "4"), ("lru", "lru", "0")):
        log = tmp_path / f"{name}.log"
        monkeypatch.setenv("TOKEMBED_CACHE_LOG", str(log))
        monkeypatch.setenv("TOKEMBED_PREFETCH_THREADS", threads)
        monkeypatch.setenv("TOKEMBED_CACHE_POLICY", policy)
        _read_epoch(url, 3, f"{10 * BLOCK}", cache_dir=tmp_path / name)
        counts[name] = len(_fetched(log, local))
    assert counts["belady"] == len(belady_fetches(trace, size, 10 * BLOCK))
    assert counts["belady"] < counts["lru"] == len(lru_fetches(trace, size, 10 * BLOCK))
    # Prefetching fetches early, so it may fetch a little more than demand-only Belady (Cao et al. 1995: the
    # aggressive rule trades fetches for stalls), never more than LRU reading on demand.
    assert counts["belady"] <= counts["prefetch"] < counts["lru"]


def _usage_sampler(cache: Path, samples: list[int], stop: threading.Event) -> threading.Thread:
    def run() -> None:
        while not stop.is_set():
            samples.append(cache_bytes(cache))
            time.sleep(0.002)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


@pytest.mark.parametrize("bound", [6 * BLOCK, 700])  # smaller than a shard; smaller than a block
def test_the_cache_never_holds_more_than_its_bound_plus_blocks_in_use(folder, s3, bound):
    local, url = folder
    samples: list[int] = []
    stop = threading.Event()
    sampler = _usage_sampler(s3.cache, samples, stop)
    try:
        got = [
            x
            for x, _ in tokembed.create_dataloader(
                url, batch_size=4, max_length=T, seed=5, num_workers=2, cache_bytes=bound
            )
        ]
    finally:
        stop.set()
        sampler.join()
    want = [x for x, _ in tokembed.create_dataloader(local, batch_size=4, max_length=T, seed=5)]
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    in_use = 2 * (4 * 2) * BLOCK  # two workers, each holding a batch of 4 windows of at most 2 blocks
    assert samples and max(samples) <= bound + in_use
    assert cache_bytes(s3.cache) <= max(bound, 0) + in_use


def test_a_block_is_fetched_once_per_machine(folder, tmp_path):
    _, url = folder
    log = tmp_path / "fetch.log"
    script = textwrap.dedent(
        f"""
        import tokembed
        loader = tokembed.create_dataloader({url!r}, batch_size=4, max_length={T}, seed=0, cache_bytes="1MiB")
        print(sum(x.shape[0] for x, _ in loader))
        """
    )
    env = {**os.environ, "TOKEMBED_CACHE_LOG": str(log)}
    procs = [
        subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True) for _ in range(3)
    ]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs) and len(set(outs)) == 1
    fetched = [tuple(line.split()[1:3]) for line in log.read_text().splitlines()]
    assert len(fetched) == len(set(fetched))  # three processes, one fetch per block


def _verified_blocks(cache: Path, local: Path) -> list[str]:
    """Every block file in the cache checked against the manifest's hash: the ones that do not match."""
    manifest = json.loads((local / "manifest.json").read_text())
    hashes = {}
    for d in manifest["splits"]["train"]["shards"]:
        for key, kind in ((d["tokens"], "tokens"), (d["index"], "index")):
            for i, h in enumerate(d["blocks"][kind]):
                hashes[f"{key}.{i:06d}"] = h
    bad = []
    for p in cache.glob("v-*/train/*"):
        if not p.name.startswith("."):
            rel = f"train/{p.name}"
            if hashlib.sha256(p.read_bytes()).hexdigest() != hashes[rel]:
                bad.append(rel)
    return bad


def test_kill_9_while_loading_never_leaves_a_block_used_unverified(folder, s3, tmp_path):
    local, url = folder
    script = textwrap.dedent(
        f"""
        import tokembed
        for epoch in range(100):
            loader = tokembed.create_dataloader({url!r}, batch_size=8, max_length={T}, seed=epoch, cache_bytes={8 * BLOCK})
            for x, _ in loader:
                pass
        """
    )
    for delay in (2.5, 3.0, 3.5, 4.0):
        p = subprocess.Popen([sys.executable, "-c", script], env=os.environ.copy())
        time.sleep(delay)
        p.send_signal(signal.SIGKILL)
        p.wait()
        assert _verified_blocks(s3.cache, local) == []
    temps = [p for p in s3.cache.rglob(".*.tmp-*")]
    want = [x for x, _ in tokembed.create_dataloader(local, batch_size=8, max_length=T, seed=1)]
    got = [x for x, _ in tokembed.create_dataloader(url, batch_size=8, max_length=T, seed=1, cache_bytes=8 * BLOCK)]
    assert all(torch.equal(a, b) for a, b in zip(got, want)) and len(got) == len(want)
    assert not any(t.exists() for t in temps)  # a killed fetch's temporary file is removed by the next admission
    assert _verified_blocks(s3.cache, local) == []


def test_another_version_at_the_same_url_never_mixes_in(tmp_path, s3):
    url = s3.url("versioned")
    v1, v2 = tmp_path / "v1", tmp_path / "v2"
    make_folder(v1, n_tokens=20_000, n_shards=2, block_bytes=BLOCK, seed=1)
    make_folder(v2, n_tokens=20_000, n_shards=2, block_bytes=BLOCK, seed=2)
    upload(v1, url)
    first = tokembed.open_shards(url, cache_bytes="1MiB")
    assert np.array_equal(first.read(0, first.n_tokens), tokembed.open_shards(v1).read(0, first.n_tokens))
    upload(v2, url)  # replaced in place: same object names, other bytes
    second = tokembed.open_shards(url, cache_bytes="1MiB")
    assert second.version != first.version
    assert np.array_equal(second.read(0, second.n_tokens), tokembed.open_shards(v2).read(0, second.n_tokens))
    assert len(list(s3.cache.glob("v-*"))) == 2


def test_a_folder_without_block_hashes_is_read_in_verified_whole_files(tmp_path, s3):
    local = tmp_path / "old"
    make_folder(local, n_tokens=20_000, n_shards=3, block_bytes=None)
    url = s3.url("old")
    upload(local, url)
    kw = dict(batch_size=4, max_length=64, seed=9)
    want = [x for x, _ in tokembed.create_dataloader(local, **kw)]
    got = [x for x, _ in tokembed.create_dataloader(url, cache_bytes="1MiB", **kw)]
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    data = bytearray((local / "train/00001.bin").read_bytes())
    data[10] ^= 1
    from remote_helpers import put_bytes

    put_bytes(f"{url}/train/00001.bin", bytes(data))
    fresh = tokembed.open_shards(url, cache_dir=tmp_path / "fresh")
    with pytest.raises(tokembed.storage.CorruptBlockError, match=rf"{url}/train/00001.bin \(bytes 0-{len(data) - 1}\)"):
        fresh.tokens(1)


def test_a_full_cache_disk_says_what_to_do(folder, monkeypatch, s3):
    _, url = folder
    ss = tokembed.open_shards(url, cache_bytes="5MiB")

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full)
    with pytest.raises(
        OSError, match=r"the disk of the cache .* is full .* smaller --cache-bytes \(now 5 MiB\) or a --cache-dir"
    ):
        ss.read(0, 10)
    monkeypatch.undo()
    assert not list(s3.cache.rglob(".*.tmp-*"))  # nothing half-written is left
    assert len(ss.read(0, 10)) == 10
