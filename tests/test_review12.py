"""review12: torchdata's StatefulDataLoader, collate_windows and the exports, against the uninterrupted run or
the libraries' own behaviour (each test here failed before the fix it names)."""

from __future__ import annotations

import pytest
import torch

import tokembed
from handmade_shards import small_corpus

torchdata = pytest.importorskip("torchdata.stateful_dataloader")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return small_corpus(tmp_path_factory.mktemp("review12") / "shards")


def stateful(ds, *, workers=0, **kw):
    sampler = tokembed.WindowBatchSampler(ds, batch_size=4, seed=3, **kw)
    return torchdata.StatefulDataLoader(
        ds, batch_sampler=sampler, collate_fn=tokembed.collate_windows, num_workers=workers
    )


def test_stateful_dataloader_saved_after_an_epoch_ended_resumes_with_the_next_epoch(folder):
    """A checkpoint taken once an epoch's loop ended (the commonest place) resumed with that epoch again, not the
    next: the finished iterator's state (epoch 0, all batches done) set the sampler back to epoch 0, and torchdata
    starts a fresh pass for a finished iterator."""
    ds = tokembed.SlidingWindowDataset(folder, max_length=32)
    ref = tokembed.create_dataloader(ds, batch_size=4, seed=3)
    epochs = [[x for x, _ in ref] for _ in range(2)]  # tokembed's own epochs 0 and 1
    dl = stateful(ds)
    assert all(torch.equal(a, b) for a, b in zip([x for x, _ in dl], epochs[0], strict=True))
    saved = dl.state_dict()
    resumed = stateful(ds)
    resumed.load_state_dict(saved)
    got = [x for x, _ in resumed]
    assert len(got) == len(epochs[1]) and all(torch.equal(a, b) for a, b in zip(got, epochs[1]))
