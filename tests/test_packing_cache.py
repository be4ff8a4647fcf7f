"""Cached packing plans: a shard folder's plan is planned once per (data, max_length, packer), read back after.

Checked against `plan_packing` on the hand-written folder's own document starts (the definition), with the
planner made unusable for the reads that must come from the cache.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

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
