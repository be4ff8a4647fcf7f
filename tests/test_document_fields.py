"""A loader's `DocumentBatch` makes ``position_ids``, ``cu_seqlens`` and ``doc_lens`` on first read.

Whatever a consumer reads, in whatever order, whenever (after the loader has moved on, after later batches were
read), and whatever it does with the batch first (pickle it as DataLoader workers do, copy it, move it, compare
it, ``dataclasses.replace`` it), every field is the definition's: tests/test_documents.py's `reference`, plain
Python loops over the document starts the hand-written shard folder was given.
"""

from __future__ import annotations

import copy
import dataclasses
import pickle
import random
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tokembed
from handmade_shards import write_cut_stream
from test_documents import counting, reference, window_start
from tokembed.data.batch import DocumentBatch

FIELDS = [f.name for f in dataclasses.fields(DocumentBatch)]
MADE = ("position_ids", "cu_seqlens", "doc_lens")  # what a loader's batch leaves to its first read


def expected(batch, doc_starts: list[int], t: int, max_documents: int | None) -> dict:
    """The definition's fields for ``batch``'s windows (found from its counting tokens)."""
    starts = [window_start(row) for row in batch.inputs]
    positions, cu, lens = reference(starts, doc_starts, t)
    b = len(starts)
    if max_documents is not None:
        cu += [b * t] * (max_documents + 1 - len(cu))
    width = max(len(r) for r in lens) if max_documents is None else max_documents
    return {
        "position_ids": torch.tensor(positions, dtype=torch.int32),
        "cu_seqlens": torch.tensor(cu, dtype=torch.int32),
        "max_seqlen": max(max(r) for r in lens),
        "doc_lens": torch.tensor([r + [0] * (width - len(r)) for r in lens], dtype=torch.int32),
    }


def check(batch, want: dict) -> None:
    assert type(batch) is DocumentBatch
    for name, value in want.items():
        got = getattr(batch, name)
        if isinstance(value, int):
            assert got == value, name
        else:
            assert got.dtype == value.dtype and got.is_contiguous() and torch.equal(got, value), name


def handled(batch, how: str):
    """``batch`` after what a consumer may do with it before reading any of its fields."""
    if how == "pickle":  # what a DataLoader worker sends: a batch with every field
        again = pickle.loads(pickle.dumps(batch))
        assert list(vars(again)) == FIELDS
        return again
    if how == "copy":
        return copy.copy(batch)
    if how == "deepcopy":
        return copy.deepcopy(batch)
    if how == "to":
        return batch.to("cpu")
    if how == "replace":
        return dataclasses.replace(batch, max_seqlen=batch.max_seqlen)
    if how == "repr":
        assert repr(batch).startswith("DocumentBatch(inputs=tensor(") and "position_ids=tensor(" in repr(batch)
    if how == "equal":
        assert batch == batch and hash(batch) == hash(batch)
    return batch


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lengths=st.lists(st.integers(1, 70), min_size=4, max_size=40),
    t=st.integers(2, 48),
    stride=st.none() | st.integers(1, 50),
    batch_size=st.integers(1, 7),
    max_documents=st.none() | st.integers(1, 40),
    seed=st.integers(0, 2**16),
)
def test_fields_read_in_any_order_at_any_time_are_the_definitions(lengths, t, stride, batch_size, max_documents, seed):
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        cuts = sorted(rng.sample(range(1, sum(lengths) + len(lengths)), k=min(3, len(lengths))))
        _, doc_starts = write_cut_stream(Path(tmp), counting(lengths), cuts=cuts)
        try:
            loader = tokembed.create_dataloader(
                tmp, batch_size=batch_size, max_length=t, stride=stride, seed=seed, drop_last=False,
                return_documents=True, max_documents=max_documents,
            )  # fmt: skip
        except ValueError as e:  # a corpus shorter than one window
            assert "needs at least" in str(e) or "fewer than" in str(e)
            return
        try:
            batches = list(loader)  # every batch first: the loader has moved on before any field is read
        except ValueError as e:
            assert "more than max_documents" in str(e)
            return
        order = list(range(len(batches)))
        rng.shuffle(order)
        for j in order:
            batch = handled(
                batches[j], rng.choice(["none", "pickle", "copy", "deepcopy", "to", "replace", "repr", "equal"])
            )
            want = expected(batch, doc_starts.tolist(), t, max_documents)
            names = list(want)
            rng.shuffle(names)
            check(batch, {k: want[k] for k in names[: rng.randint(0, len(names))]})  # some fields, any order
            check(batch, want)  # then all of them
            assert len(batch) == len(batch.inputs)


def test_a_batch_reads_each_field_once_and_keeps_it(tmp_path):
    write_cut_stream(tmp_path, counting([5, 9, 3, 30, 2, 7] * 4), cuts=[40])
    batch = next(iter(tokembed.create_dataloader(tmp_path, batch_size=3, max_length=8, return_documents=True)))
    assert list(vars(batch)) == ["inputs", "targets", "max_seqlen"]  # nothing else made yet
    first = [getattr(batch, name) for name in MADE]
    assert [getattr(batch, name) for name in MADE] == first  # the same tensors: made once
    assert set(vars(batch)) == set(FIELDS)
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'position_ids'"):
        batch.position_ids = first[0]
    with pytest.raises(AttributeError, match="no attribute 'positions'"):
        batch.positions  # noqa: B018
    built = DocumentBatch(batch.inputs, batch.targets, *first[:2], batch.max_seqlen, first[2])  # built by hand
    assert list(vars(built)) == FIELDS and built.position_ids is first[0]


@pytest.mark.parametrize("packing", [None, "best-fit"])
def test_batches_from_workers_arrive_with_every_field(tmp_path, packing):
    lengths = np.random.default_rng(2).integers(1, 50, size=80).tolist()
    write_cut_stream(tmp_path, counting(lengths), cuts=[300, 900])
    kw = dict(batch_size=4, max_length=16, seed=1, return_documents=True, packing=packing)
    here = list(tokembed.create_dataloader(tmp_path, **kw))
    there = list(tokembed.create_dataloader(tmp_path, num_workers=2, **kw))
    assert len(here) == len(there) > 5
    for a, b in zip(here, there, strict=True):
        assert list(vars(b)) == FIELDS  # pickled in the worker: every field made there
        for name in reversed(FIELDS):
            u, v = getattr(a, name), getattr(b, name)
            assert u == v if isinstance(u, int) else torch.equal(u, v)
