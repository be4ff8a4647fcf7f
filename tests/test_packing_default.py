"""Packing's default (materialize=None): a small local split is materialized by itself, everything else gathered,
and the batches are the same either way; the loader's per-process tables (windows' document bounds, packed
windows' segments) give what the per-batch searches give.

Two implementations against each other: the materialized rows against the gathered pieces (`PackedWindows._fill`,
itself checked against the plan in tests/test_packing.py), the tables against the searches they replace (the
metadata itself is checked against the shards' index in tests/test_documents.py).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

import tokembed
from handmade_shards import write_cut_stream
from tokembed.data import packed, windows
from tokembed.data.packed import PackedWindows


def documents(seed: int, n: int = 150) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    lengths = np.concatenate([rng.integers(1, 40, n), [90, 33]])  # two longer than a window of 32: cut
    docs, pos = [], 0
    for length in lengths.tolist():
        docs.append(list(range(pos, pos + length)))
        pos += length + 1
    return docs


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TOKEMBED_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "packing"


@pytest.fixture
def folder(tmp_path):
    root = tmp_path / "f"
    write_cut_stream(root, documents(3), cuts=[700, 1900, 1901])  # documents cross shards
    return root


def fields(batch):
    """A batch's tensors and numbers: a pair, or a DocumentBatch's fields in order."""
    if isinstance(batch, tuple):
        return tuple(batch)
    return tuple(getattr(batch, f.name) for f in dataclasses.fields(batch))


def same_batches(a, b):
    a, b = list(a), list(b)
    assert len(a) == len(b) > 5
    for x, y in zip(a, b, strict=True):
        for u, v in zip(fields(x), fields(y), strict=True):
            assert u == v if isinstance(u, int) else torch.equal(u, v)


def stored_files(cache):
    return sorted(p.name.split(".", 1)[1] for p in cache.iterdir() if not p.name.endswith((".npz", ".lock")))


@pytest.mark.parametrize("output", ["pairs", "documents"])
def test_a_small_local_split_is_materialized_by_default_with_the_same_batches(folder, cache, output):
    kw = dict(batch_size=3, max_length=32, packing="best-fit", seed=4, output=output)
    default = tokembed.create_dataloader(folder, **kw)
    assert default.dataset.materialize is True
    assert stored_files(cache) == ["ignored", "rows-uint16"]
    gathered = tokembed.create_dataloader(folder, materialize=False, **kw)
    assert gathered.dataset.materialize is False
    same_batches(default, gathered)
    assert PackedWindows(folder, max_length=32).materialize is True  # the dataset's own default too


def test_cache_dir_takes_the_plan_and_the_rows_of_a_local_folder(folder, cache, tmp_path):
    """``cache_dir`` names tokembed's cache for this loader: packing's plan and rows go there, not to the default."""
    kw = dict(batch_size=3, max_length=32, packing="best-fit", seed=4)
    mine = tmp_path / "mine"
    loader = tokembed.create_dataloader(folder, cache_dir=mine, **kw)
    assert loader.dataset.materialize is True
    assert stored_files(mine / "packing") == ["ignored", "rows-uint16"]
    assert len(list((mine / "packing").glob("*.npz"))) == 1  # the plan
    assert not cache.exists()  # nothing in TOKEMBED_CACHE_DIR
    same_batches(loader, tokembed.create_dataloader(folder, materialize=False, **kw))
    # The CLI's --cache-dir makes it the process's default (set_remote_defaults): packing follows it too.
    from tokembed.storage.options import set_remote_defaults

    old = set_remote_defaults(cache_dir=tmp_path / "cli")
    try:
        assert PackedWindows(folder, max_length=16).materialize is True
    finally:
        set_remote_defaults(storage_options=old.storage_options, cache_dir=old.cache_dir, cache_bytes=old.cache_bytes)
    assert stored_files(tmp_path / "cli" / "packing") == ["ignored", "rows-uint16"]
    assert stored_files(cache) == []  # (the gathered loader above planned into the default cache: no rows)


def test_processes_opening_the_same_data_together_write_the_rows_once(folder, cache, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="tokembed._lock")
    """DDP ranks and workers open the dataset at the same moment: one writes the rows, the others wait and read them
    (before, each wrote its own copy, and each checked the disk's room as if it were alone)."""
    import threading
    import time

    writes = []
    write = PackedWindows._write_stored

    def slow_write(self, *args):
        writes.append(threading.get_ident())
        time.sleep(0.5)  # the others arrive while the rows are being written
        return write(self, *args)

    monkeypatch.setattr(PackedWindows, "_write_stored", slow_write)
    made: list = []
    threads = [threading.Thread(target=lambda: made.append(PackedWindows(folder, max_length=32))) for _ in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(made) == 3 and all(d.materialize for d in made)
    assert len(writes) == 1
    waits = [r.getMessage() for r in caplog.records if r.name == "tokembed._lock"]
    assert len(waits) == 2 and all(w.startswith(f"waiting for process {os.getpid()}, which holds ") for w in waits)
    gathered = PackedWindows(folder, max_length=32, materialize=False)
    k = np.arange(len(gathered))
    for d in made:
        assert all(torch.equal(u, v) for u, v in zip(d.gather(k), gathered.gather(k), strict=True))


def test_a_cache_on_a_file_system_without_locks_still_materializes(folder, cache, monkeypatch):
    """The lock only saves work: where flock is not supported (some network file systems) the rows are written
    unlocked (atomically, so two writers are safe), not refused."""
    import errno

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr("tokembed._lock.fcntl.flock", no_locks)
    asked = PackedWindows(folder, max_length=32, materialize=True)
    assert asked.materialize is True and stored_files(cache) == ["ignored", "rows-uint16"]
    gathered = PackedWindows(folder, max_length=32, materialize=False)
    k = np.arange(len(gathered))
    assert all(torch.equal(u, v) for u, v in zip(asked.gather(k), gathered.gather(k), strict=True))

    def broken(fd, op):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr("tokembed._lock.fcntl.flock", broken)
    for name in list(cache.iterdir()):
        name.unlink()
    with pytest.raises(OSError, match="Input/output error"):
        PackedWindows(folder, max_length=32, materialize=True)  # asked for: a real failure is not hidden


def test_a_split_over_the_limit_and_an_array_are_gathered(folder, cache, monkeypatch):
    monkeypatch.setattr(packed, "AUTO_MATERIALIZE_TOKENS", 100)
    assert PackedWindows(folder, max_length=32).materialize is False
    assert PackedWindows(folder, max_length=32, materialize=True).materialize is True  # asked: any size
    monkeypatch.setattr(packed, "AUTO_MATERIALIZE_TOKENS", 1 << 28)
    stream = np.concatenate([np.append(np.asarray(d), 0) for d in documents(5)])
    assert PackedWindows(stream, max_length=32, eot_token=0).materialize is False


@pytest.mark.parametrize("output", ["pairs", "documents"])
@pytest.mark.parametrize("phased", [False, True])
def test_a_mixtures_sources_are_materialized_by_default_with_the_same_batches(folder, cache, tmp_path, output, phased):
    other = tmp_path / "g"
    write_cut_stream(other, documents(6), cuts=[500])
    if phased:
        mixture = tokembed.PhasedMixture([(0, {folder: 0.7, other: 0.3}), (200, {folder: 0.2, other: 0.8})], seed=1)
    else:
        mixture = tokembed.Mixture({folder: 0.5, other: 0.5}, seed=1)
    kw = dict(batch_size=3, max_length=32, packing="best-fit", seed=2, output=output)
    default = tokembed.create_dataloader(mixture, **kw)
    assert all(s.materialize is True for s in default.dataset.sources)
    assert stored_files(cache) == ["ignored", "ignored", "rows-uint16", "rows-uint16"]  # one pair per source
    gathered = tokembed.create_dataloader(mixture, materialize=False, **kw)
    assert all(s.materialize is False for s in gathered.dataset.sources)
    same_batches(default, gathered)


def test_an_unwritable_cache_leaves_the_default_gathered_and_the_same(folder, tmp_path, monkeypatch, caplog):
    want = list(tokembed.create_dataloader(folder, batch_size=2, max_length=32, packing="best-fit", materialize=False))
    (tmp_path / "file").write_text("not a folder")
    monkeypatch.setenv("TOKEMBED_CACHE_DIR", str(tmp_path / "file"))
    with pytest.warns(UserWarning, match="the packing plan was not cached"), caplog.at_level(logging.INFO):
        loader = tokembed.create_dataloader(folder, batch_size=2, max_length=32, packing="best-fit")
    assert loader.dataset.materialize is False
    assert "packed windows gathered from the shards: the cache could not take them" in caplog.text
    same_batches(loader, want)
    with pytest.warns(UserWarning), pytest.raises(OSError):  # asked for: the error is the user's to see
        PackedWindows(folder, max_length=32, materialize=True)


@pytest.mark.parametrize("stride", [None, 8, 40])
@pytest.mark.parametrize("within_documents", [False, True])
def test_the_windows_bounds_table_gives_what_the_searches_give(folder, monkeypatch, stride, within_documents):
    kw = dict(batch_size=3, max_length=32, stride=stride, within_documents=within_documents, seed=2)
    table = tokembed.create_dataloader(folder, return_documents=True, **kw)
    if stride is None:  # one window per 32 tokens: the table is small enough to keep
        ds = table.dataset
        assert ds._window_bounds(np.arange(len(ds))) is not None
    monkeypatch.setattr(windows, "_BOUNDS_BYTES", 0)  # no table: searched per batch
    searched = tokembed.create_dataloader(folder, return_documents=True, **kw)
    assert searched.dataset._window_bounds(np.arange(3)) is None
    same_batches(table, searched)


def test_materialized_segments_are_the_selections(folder, cache):
    ds = PackedWindows(folder, max_length=32, materialize=True)
    k = np.random.default_rng(0).permutation(len(ds))
    for got, want in zip(ds._segments(k), ds._select(k).segments(32), strict=True):
        assert np.array_equal(got, want)


def test_a_megatron_dataset_made_elsewhere_is_never_read_from_another_datasets_rows(tmp_path, cache):
    """Without tokembed's record of the .bin's sha256, a Megatron dataset is known by its .idx, which another corpus
    of the same document lengths shares (fixed-length sequences; a dataset made again in place): its materialized
    rows must be its own tokens, as gathering gives them."""
    import warnings

    with warnings.catch_warnings():  # megatron-core warns that Apex and Transformer Engine are absent
        warnings.simplefilter("ignore")
        from megatron.core.datasets import indexed_dataset as megatron_indexed

    def build(prefix, offset):
        builder = megatron_indexed.IndexedDatasetBuilder(f"{prefix}.bin", dtype=np.uint16)
        for d in documents(7):
            builder.add_item(torch.tensor([t + offset for t in d] + [50256]))
            builder.end_document()
        builder.finalize(f"{prefix}.idx")

    kw = dict(batch_size=3, max_length=32, packing="best-fit", seed=4)
    build(tmp_path / "a", 0)
    build(tmp_path / "b", 20000)  # other tokens, the same documents' lengths: the same .idx
    assert (tmp_path / "a.idx").read_bytes() == (tmp_path / "b.idx").read_bytes()
    tokembed.create_dataloader(tmp_path / "a", **kw)  # materializes a's rows
    for prefix in ("b", "a"):
        if prefix == "a":
            build(tmp_path / "a", 10000)  # made again in place: the same .idx
        default = tokembed.create_dataloader(tmp_path / prefix, **kw)
        assert default.dataset.materialize is True
        same_batches(default, tokembed.create_dataloader(tmp_path / prefix, materialize=False, **kw))


def _can_mount() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"], capture_output=True)
    return probe.returncode == 0


@pytest.mark.slow  # a Python process in a private mount namespace, as tests/test_full_disk.py
@pytest.mark.skipif(not _can_mount(), reason="no private mount namespace (unshare -rm) here")
def test_the_default_leaves_half_of_a_small_cache_disk_free(folder, tmp_path):
    """On a real 2 MiB file system (a tmpfs in a private mount namespace) a split whose rows would take more than
    half of the free space is gathered by default (logged), a smaller one materialized (logged with its size);
    materialize=True writes the larger one anyway."""
    big, small, disk = tmp_path / "big", tmp_path / "small", tmp_path / "disk"
    rng = np.random.default_rng(0)
    write_cut_stream(big, [list(range(n)) for n in rng.integers(1, 200, 5000).tolist()], cuts=[1000])  # ~1 MB rows
    write_cut_stream(small, [list(range(n)) for n in rng.integers(1, 200, 2000).tolist()], cuts=[1000])  # ~0.4 MB
    script = f"""
import logging, shutil, sys, torch, tokembed
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")
kw = dict(batch_size=4, max_length=64, packing="best-fit")
for path in ({str(big)!r}, {str(small)!r}):
    loader = tokembed.create_dataloader(path, **kw)
    want = tokembed.create_dataloader(path, materialize=False, **kw)
    same = all(torch.equal(a, b) for x, y in zip(loader, want, strict=True) for a, b in zip(x, y))
    print("materialized", loader.dataset.materialize, "same", same, "free", shutil.disk_usage({str(disk)!r}).free)
print("asked", tokembed.create_dataloader({str(big)!r}, materialize=True, **kw).dataset.materialize)
"""
    disk.mkdir()
    proc = subprocess.run(
        [
            "unshare",
            "-rm",
            "sh",
            "-ec",
            f'mount -t tmpfs -o size=2m tmpfs "{disk}"\nexec "{sys.executable}" -c "$0"',
            script,
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "TOKEMBED_CACHE_DIR": str(disk)},
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert (
        "the packed windows would take 1,0" in lines[0] and "more than half (materialize=True writes them)" in lines[0]
    )
    assert lines[1].startswith("materialized False same True free ")
    assert "packed windows materialized once into" in lines[2] and "bytes; materialize=False gathers them)" in lines[2]
    assert lines[3].startswith("materialized True same True free ") and int(lines[3].split()[-1]) > 1 << 20
    assert lines[-1] == "asked True"
