"""review13: the fixes merged this morning (sampler resume, staged exports, packed leftovers, a packed run's model,
hand-built DocumentBatch), each test against an independent reference (each failed before the fix it names)."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest
import torch

import tokembed
from handmade_shards import small_corpus
from tokembed.data.batch import DocumentBatch


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return small_corpus(tmp_path_factory.mktemp("review13") / "shards")


@dataclasses.dataclass(frozen=True)
class LabelledBatch(DocumentBatch):
    """A user's batch: the loader's fields plus one of its own."""

    labels: torch.Tensor

    def tokens(self) -> int:
        return self.inputs.numel()


def test_a_document_batch_subclass_stays_itself_through_to(folder):
    """``to()`` (and ``pin_memory()``, which a DataLoader calls) made a plain `DocumentBatch` from a subclass: its
    methods gone, and its own fields left as stray attributes outside the dataclass's fields (``repr``, ``==``),
    while copy, deepcopy, pickling and ``dataclasses.replace`` keep the subclass, as torch's ``to()`` keeps the
    type."""
    ds = tokembed.SlidingWindowDataset(folder, max_length=16)
    b = next(iter(tokembed.create_dataloader(ds, batch_size=3, output="documents")))
    mine = LabelledBatch(**{f.name: getattr(b, f.name) for f in dataclasses.fields(b)}, labels=b.targets + 1)
    for same in (copy.copy(mine), copy.deepcopy(mine), pickle.loads(pickle.dumps(mine)), dataclasses.replace(mine)):
        assert type(same) is LabelledBatch
    moved = mine.to(torch.device("cpu"))
    assert type(moved) is LabelledBatch and moved.tokens() == 48
    assert moved == mine and "labels=" in repr(moved)
