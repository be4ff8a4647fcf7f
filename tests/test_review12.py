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


@pytest.mark.parametrize(("saved_workers", "new_workers"), [(2, 1), (0, 2)])
@pytest.mark.parametrize("finished", [False, True])
def test_stateful_dataloader_state_resumes_at_another_num_workers_through_the_sampler(
    folder, saved_workers, new_workers, finished
):
    """torchdata refuses a state saved at another num_workers with a bare AssertionError (2 -> 1: no message at
    all); tokembed's order does not depend on the workers, so the sampler takes that state and resumes exactly."""
    ds = tokembed.SlidingWindowDataset(folder, max_length=32)
    ref = tokembed.create_dataloader(ds, batch_size=4, seed=3)
    flat = [x for _ in range(2) for x, _ in ref]  # epochs 0 and 1
    dl = stateful(ds, workers=saved_workers)
    it = iter(dl)
    head = list(it) if finished else [next(it) for _ in range(3)]
    saved = dl.state_dict()
    with pytest.raises(AssertionError):  # torchdata's own resume, at another num_workers
        other = stateful(ds, workers=new_workers)
        other.load_state_dict(saved)
        next(iter(other))
    resumed = stateful(ds, workers=new_workers)
    resumed.batch_sampler.load_state_dict(saved)  # tokembed's: the position in torchdata's state
    rest = [x for x, _ in resumed]
    got = [x for x, _ in head] + rest + [x for x, _ in resumed]
    assert len(got) >= len(flat) and all(torch.equal(a, b) for a, b in zip(got, flat))


@pytest.mark.parametrize("workers", [0, 1, 2])
def test_window_batch_sampler_resume_point_survives_a_dataloader_with_workers(folder, workers):
    """torch's multi-process DataLoader iterator calls ``iter(batch_sampler)`` twice (in ``__init__`` and in
    ``_reset``): the first call took the loaded resume point and the second started the epoch again, silently."""
    from torch.utils.data import DataLoader

    ds = tokembed.SlidingWindowDataset(folder, max_length=32)
    ref = [x for x, _ in tokembed.create_dataloader(ds, batch_size=4, seed=3)]
    first = tokembed.WindowBatchSampler(ds, batch_size=4, seed=3)
    it = iter(first)
    for _ in range(3):
        next(it)
    sampler = tokembed.WindowBatchSampler(ds, batch_size=4, seed=3)
    sampler.load_state_dict(first.state_dict())
    dl = DataLoader(ds, batch_sampler=sampler, collate_fn=tokembed.collate_windows, num_workers=workers)
    rest = [x for x, _ in dl]
    assert len(rest) == len(ref) - 3 and all(torch.equal(a, b) for a, b in zip(rest, ref[3:]))
    assert sampler.state_dict()["epoch"] == 1  # ... and the next pass is the next epoch
