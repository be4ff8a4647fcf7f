"""Cached packing plans: a shard folder's plan is planned once per (data, max_length, packer), read back after.

Checked against `plan_packing` on the hand-written folder's own document starts (the definition), with the
planner made unusable for the reads that must come from the cache.
"""

from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest
import torch

import tokembed
from handmade_shards import write_cut_stream
from tokembed.data import packed
from tokembed.data.packed import PackedWindows
from tokembed.data.packing import plan_packing

ARRAYS = ("piece_start", "piece_len", "piece_last", "window_first")


def documents(seed, n=120):
    rng = np.random.default_rng(seed)
    lengths = np.concatenate([rng.integers(1, 30, n), [70, 45]])
    docs, pos = [], 0
    for length in lengths.tolist():
        docs.append(list(range(pos, pos + length)))
        pos += length + 1
    return docs


def same_plan(a, b):
    assert all(np.array_equal(getattr(a, k), getattr(b, k)) for k in ARRAYS)
    assert a.stats() == b.stats()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    path = tmp_path / "cache"
    monkeypatch.setenv("TOKEMBED_CACHE_DIR", str(path))
    return path / "packing"


def no_planning(*args, **kwargs):
    raise AssertionError("planned again: the cache was not read")


def test_a_folders_plan_is_cached_and_read_back(tmp_path, cache, monkeypatch):
    root = tmp_path / "f"
    stream, starts = write_cut_stream(root, documents(1), cuts=[300, 900])
    first = PackedWindows(root, max_length=32)
    same_plan(first.plan, plan_packing(starts, len(stream), max_length=32))
    assert len(list(cache.glob("*.npz"))) == 1
    PackedWindows(root, max_length=17, packing="first-fit")  # other options: another plan, another file
    assert len(list(cache.glob("*.npz"))) == 2
    assert not [p for p in cache.iterdir() if p.name.startswith(".")], "no temporary file is left"
    monkeypatch.setattr(packed, "plan_packing", no_planning)
    monkeypatch.setattr(tokembed.data.packing, "plan_packing", no_planning)
    again = PackedWindows(root, max_length=32)
    same_plan(again.plan, first.plan)
    a = [b.inputs for b in tokembed.create_dataloader(first, batch_size=2, seed=3, return_documents=True)]
    b = [b.inputs for b in tokembed.create_dataloader(again, batch_size=2, seed=3, return_documents=True)]
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def test_a_folder_prepared_again_is_planned_again(tmp_path, cache):
    root = tmp_path / "f"
    write_cut_stream(root, documents(1), cuts=[300])
    PackedWindows(root, max_length=32)
    shutil.rmtree(root)
    stream, starts = write_cut_stream(root, documents(2), cuts=[300])
    same_plan(PackedWindows(root, max_length=32).plan, plan_packing(starts, len(stream), max_length=32))
    assert len(list(cache.glob("*.npz"))) == 2


def test_a_damaged_cached_plan_is_planned_again(tmp_path, cache):
    root = tmp_path / "f"
    stream, starts = write_cut_stream(root, documents(3), cuts=[500])
    PackedWindows(root, max_length=32)
    (path,) = cache.glob("*.npz")
    path.write_bytes(path.read_bytes()[:100])  # cut short, as by a crash without the atomic rename
    same_plan(PackedWindows(root, max_length=32).plan, plan_packing(starts, len(stream), max_length=32))
    np.load(path)["piece_start"]  # written again, whole


def test_a_cache_that_cannot_be_written_is_skipped_with_a_warning(tmp_path, monkeypatch):
    root = tmp_path / "f"
    stream, starts = write_cut_stream(root, documents(4), cuts=[500])
    (tmp_path / "file").write_text("not a folder")
    monkeypatch.setenv("TOKEMBED_CACHE_DIR", str(tmp_path / "file"))
    with pytest.warns(UserWarning, match=r"the packing plan was not cached \(.*\); it is planned again next time"):
        ds = PackedWindows(root, max_length=32)
    same_plan(ds.plan, plan_packing(starts, len(stream), max_length=32))


# -- materialized packed windows: the same batches, read as rows --------------------------------------------


def parts(batch):
    """A batch's tensors (and numbers): a pair, or a DocumentBatch's fields in order."""
    if isinstance(batch, tuple | list):
        return tuple(batch)
    return tuple(getattr(batch, f.name) for f in dataclasses.fields(batch))


@pytest.mark.parametrize("output", ["pairs", "documents"])
def test_materialized_windows_are_the_packed_windows(tmp_path, cache, output):
    root = tmp_path / "f"
    write_cut_stream(root, documents(5, n=300), cuts=[400, 1200, 1201, 2500])  # documents cross shards
    kw = dict(batch_size=3, seed=2, output=output)
    want = list(tokembed.create_dataloader(PackedWindows(root, max_length=32), **kw))
    stored = PackedWindows(root, max_length=32, materialize=True)
    got = list(tokembed.create_dataloader(stored, **kw))
    assert len(got) == len(want) > 10
    for a, b in zip(got, want, strict=True):
        for x, y in zip(parts(a), parts(b), strict=True):
            assert x == y if isinstance(x, int) else torch.equal(x, y)
    assert any(f.name.endswith(".rows-uint16") for f in cache.iterdir())
    workers = list(tokembed.create_dataloader(stored, num_workers=2, **kw))  # each worker maps the rows itself
    assert all(torch.equal(parts(a)[0], parts(b)[0]) for a, b in zip(workers, want, strict=True))


def test_materialized_windows_are_written_once_and_again_when_damaged(tmp_path, cache, monkeypatch):
    root = tmp_path / "f"
    write_cut_stream(root, documents(6), cuts=[500])
    want = PackedWindows(root, max_length=16).gather(np.arange(8))
    PackedWindows(root, max_length=16, materialize=True)
    (rows,) = cache.glob("*.rows-uint16")
    written = []
    real = PackedWindows._write_stored
    monkeypatch.setattr(PackedWindows, "_write_stored", lambda self, *a: written.append(1) or real(self, *a))
    again = PackedWindows(root, max_length=16, materialize=True)
    assert not written, "read back, not written again"
    assert all(torch.equal(a, b) for a, b in zip(again.gather(np.arange(8)), want))
    rows.write_bytes(rows.read_bytes()[:-2])  # cut short
    fixed = PackedWindows(root, max_length=16, materialize=True)
    assert written == [1] and all(torch.equal(a, b) for a, b in zip(fixed.gather(np.arange(8)), want))


def test_materialize_needs_a_shard_folder():
    with pytest.raises(ValueError, match=r"materialize applies to shard folders .*: leave materialize out"):
        PackedWindows(np.arange(100) % 7, max_length=8, eot_token=0, materialize=True)
    with pytest.raises(TypeError, match=r"materialize must be True or False, got .yes. \(str\)"):
        PackedWindows(np.arange(100) % 7, max_length=8, eot_token=0, materialize="yes")


def test_create_dataloader_materializes_on_request(tmp_path, cache):
    root = tmp_path / "f"
    write_cut_stream(root, documents(7), cuts=[500])
    kw = dict(batch_size=2, max_length=16, packing="best-fit", seed=1)
    got = [x for x, _ in tokembed.create_dataloader(root, materialize=True, **kw)]
    want = [x for x, _ in tokembed.create_dataloader(root, **kw)]
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    with pytest.raises(ValueError, match=r"materialize=True applies with packing .*; give packing= or leave it out"):
        tokembed.create_dataloader(root, batch_size=2, max_length=16, materialize=True)
    other = tmp_path / "g"
    write_cut_stream(other, documents(8), cuts=[300])
    mix = tokembed.Mixture({root: 0.5, other: 0.5}, seed=1)
    with pytest.raises(ValueError, match=r"materialize=True applies with packing .*; give packing= or leave it out"):
        tokembed.create_dataloader(mix, batch_size=2, max_length=16, materialize=True)
    with pytest.raises(ValueError, match=r"materialize applies with packing .*; give packing= or leave it out"):
        tokembed.SlidingWindowDataset(mix, max_length=16, materialize=True)
