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


# ------------------------------------------------------------------------------------- Megatron --split all

MEGATRON_ALL_CHILD = """
import os, signal, sys
from tokembed.shards.export import export_megatron
kill_at, calls, real = int(sys.argv[3]), [0], os.replace
def replace(a, b):  # kill -9 at the kill_at-th rename
    calls[0] += 1
    if calls[0] == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(a, b)
os.replace = replace
export_megatron(sys.argv[1], sys.argv[2], split="all", overwrite=True)
"""


@pytest.mark.slow
def test_kill_9_during_a_megatron_export_of_both_splits_never_pairs_one_exports_train_with_anothers_val(tmp_path):
    """``--split all`` wrote PREFIX_train and then PREFIX_val, each committed on its own: killed between them (or
    failing in the val split), train was the new export's beside the old export's val (or none), and the same
    command run again refused PREFIX_train as existing. Both splits now change together."""
    import subprocess
    import sys

    from test_export_safety import megatron_state, with_val
    from tokembed.shards.export import export_megatron

    old, new = with_val(tmp_path / "old", 5, 400), with_val(tmp_path / "new", 6, 500)
    prefix = tmp_path / "out" / "corpus"
    states = set()
    for kill_at in range(1, 40):
        export_megatron(tmp_path / "old", prefix, split="all", overwrite=True)
        args = [sys.executable, "-c", MEGATRON_ALL_CHILD, str(tmp_path / "new"), str(prefix), str(kill_at)]
        rc = subprocess.run(args).returncode
        pair = tuple(
            megatron_state(prefix.with_name(f"corpus_{s}"), {"old": old[i], "new": new[i]})
            for i, s in enumerate(("train", "val"))
        )
        states.add(pair)
        assert "old" not in pair or "new" not in pair, (kill_at, pair)  # never one export's train, another's val
        if rc == 0:
            break
        export_megatron(tmp_path / "new", prefix, split="all", overwrite=True)  # the rerun finishes the job
        assert [
            megatron_state(prefix.with_name(f"corpus_{s}"), {"new": new[i]}) for i, s in enumerate(("train", "val"))
        ] == ["new", "new"]
    assert rc == 0 and ("old", "old") in states and ("new", "new") in states


# ------------------------------------------------------------------------------------- nanoGPT --split


@pytest.mark.parametrize(("split", "other"), [("train", "val.bin"), ("val", "train.bin")])
def test_a_nanogpt_export_of_one_split_never_deletes_the_other_splits_file_without_overwrite(tmp_path, split, other):
    """Without --overwrite, ``--split train`` into a folder holding only a val.bin (nanoGPT's own, or the user's)
    deleted it silently (as the other split of an older export); it is now refused by name, and --overwrite
    replaces it as before."""
    from test_export_safety import with_val
    from tokembed.shards.export import export_nanogpt

    with_val(tmp_path / "src", 7, 40)
    out = tmp_path / "nano"
    out.mkdir()
    (out / other).write_bytes(b"the user's own file")
    with pytest.raises(FileExistsError, match=rf"{other} already exists.*--overwrite"):
        export_nanogpt(tmp_path / "src", out, split=split)
    assert (out / other).read_bytes() == b"the user's own file"
    assert sorted(p.name for p in out.iterdir()) == [other]
    export_nanogpt(tmp_path / "src", out, split=split, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == sorted(["meta.pkl", f"{split}.bin"])
