"""PyTorch-native trainers, torchdata's StatefulDataLoader and torchtitan's BaseDataLoader, run for real.

References: tokembed's own loader (its order and its batches), torch's default collate, and the
uninterrupted run for every resumed one; torchtitan's own ParallelAwareDataloader for what it refuses.
"""

from __future__ import annotations

import json

import pytest
import torch
from torch.utils.data import DataLoader

import tokembed
from handmade_shards import small_corpus


@pytest.fixture
def folder(tmp_path):
    return small_corpus(tmp_path / "shards")


def same(a, b) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


# ------------------------------------------------------------------------------------- PyTorch-native


def test_as_dataloader_is_a_dataloader_that_keeps_the_state(folder):
    loader = tokembed.create_dataloader(folder, batch_size=4, max_length=32, seed=2)
    dl = loader.as_dataloader()
    assert isinstance(dl, DataLoader) and len(dl) == len(loader)
    ref = [x for x, _ in tokembed.create_dataloader(folder, batch_size=4, max_length=32, seed=2)]
    it = iter(dl)
    head = [next(it)[0] for _ in range(5)]
    state = dl.state_dict()
    again = tokembed.create_dataloader(folder, batch_size=4, max_length=32, seed=2).as_dataloader()
    again.load_state_dict(json.loads(json.dumps(state)))
    assert same(head + [x for x, _ in again], ref)
    dl.set_epoch(3)
    assert loader.epoch == 3


def test_rows_through_as_dataloader_are_what_litgpt_slices(folder):
    dl = tokembed.create_dataloader(folder, batch_size=4, max_length=32, seed=2, output="rows").as_dataloader()
    pairs = list(tokembed.create_dataloader(folder, batch_size=4, max_length=32, seed=2))
    for rows, (x, y) in zip(dl, pairs, strict=True):
        assert torch.equal(rows[:, 0:32], x) and torch.equal(rows[:, 1:33], y)  # litgpt's pretrain slicing


def test_collate_windows_in_a_users_own_dataloader(folder):
    ds = tokembed.SlidingWindowDataset(folder, max_length=16)
    fast = DataLoader(ds, batch_size=8, shuffle=False, collate_fn=tokembed.collate_windows)
    slow = DataLoader(ds, batch_size=8, shuffle=False)  # torch's default collate over (input, target) pairs
    for (x, y), (x0, y0) in zip(fast, slow, strict=True):
        assert torch.equal(x, x0) and torch.equal(y, y0)


# ------------------------------------------------------------------------------------- torchdata


torchdata = pytest.importorskip("torchdata.stateful_dataloader")


def stateful(ds, *, workers, sampler=None, **kw):
    if sampler is not None:
        return torchdata.StatefulDataLoader(
            ds, batch_sampler=sampler, collate_fn=tokembed.collate_windows, num_workers=workers
        )
    return torchdata.StatefulDataLoader(ds, collate_fn=tokembed.collate_windows, num_workers=workers, **kw)


@pytest.mark.parametrize("workers", [0, 2])
def test_stateful_dataloader_with_tokembeds_sampler_reads_its_order_and_resumes(folder, workers):
    ds = tokembed.SlidingWindowDataset(folder, max_length=32)
    ref = [x for x, _ in tokembed.create_dataloader(ds, batch_size=4, seed=3)]

    def make():
        return stateful(ds, workers=workers, sampler=tokembed.WindowBatchSampler(ds, batch_size=4, seed=3))

    assert same([x for x, _ in make()], ref)
    dl = make()
    it = iter(dl)
    head = [next(it)[0] for _ in range(6)]
    state = dl.state_dict()
    again = make()
    again.load_state_dict(state)
    assert same(head + [x for x, _ in again], ref)


@pytest.mark.slow
def test_stateful_dataloader_with_its_own_shuffle_resumes_with_workers(folder):
    ds = tokembed.SlidingWindowDataset(folder, max_length=32)

    def make():
        torch.manual_seed(0)
        return stateful(ds, workers=2, batch_size=4, shuffle=True)

    full = [x for x, _ in make()]
    dl = make()
    it = iter(dl)
    head = [next(it)[0] for _ in range(5)]
    state = dl.state_dict()
    again = make()
    again.load_state_dict(state)
    assert same(head + [x for x, _ in again], full)


def test_window_batch_sampler_state_is_the_loaders_and_elastic(folder):
    ds = tokembed.SlidingWindowDataset(folder, max_length=16)
    one = tokembed.WindowBatchSampler(ds, batch_size=4, seed=1)
    it = iter(one)
    for _ in range(3):
        next(it)
    state = one.state_dict()
    assert state["format"] == "tokembed-loader" and state["batches_done"] == 3
    # two ranks of 2 resume the global order where one rank of 4 stopped
    rest = [b for b in it]
    halves = [tokembed.WindowBatchSampler(ds, batch_size=2, seed=1, rank=r, world_size=2) for r in range(2)]
    for h in halves:
        h.load_state_dict(state)
    assert [a + b for a, b in zip(*halves)] == rest
    with pytest.raises(TypeError, match=r"a Mixture's windows are indexed by slots"):
        tokembed.WindowBatchSampler(
            tokembed.SlidingWindowDataset(tokembed.Mixture({folder: 1}), max_length=8), batch_size=2
        )


# ------------------------------------------------------------------------------------- torchtitan


def titan(folder, *, rank, world, local_batch_size, **config):
    from tokembed.integrations.torchtitan import TitanDataLoader

    cfg = TitanDataLoader.Config(dataset_path=str(folder), seed=5, infinite=False, **config)
    return cfg.build(dp_world_size=world, dp_rank=rank, tokenizer=None, seq_len=32, local_batch_size=local_batch_size)


def test_torchtitan_contract_batches_and_positions(folder):
    pytest.importorskip("torchtitan")
    from torchtitan.components.dataloader import BaseDataLoader

    dl = titan(folder, rank=1, world=2, local_batch_size=4)
    assert isinstance(dl, BaseDataLoader)
    ref = list(
        tokembed.create_dataloader(
            folder, batch_size=4, max_length=32, seed=5, rank=1, world_size=2, return_documents=True
        )
    )
    got = list(dl)
    assert len(got) == len(ref)
    for (inputs, labels), b in zip(got, ref):
        assert set(inputs) == {"input", "positions"}
        assert torch.equal(inputs["input"], b.inputs) and torch.equal(labels, b.targets)
        assert torch.equal(inputs["positions"], b.position_ids)
    state = dl.state_dict()
    assert set(state) == {"tokembed", "world_size"} and state["world_size"] == 2


@pytest.mark.parametrize("new_world", [1, 2, 4])
def test_torchtitan_resume_through_dcp_at_another_data_parallel_degree(folder, tmp_path, new_world):
    pytest.importorskip("torchtitan")
    import torch.distributed.checkpoint as dcp
    from torchtitan.components.dataloader import ParallelAwareDataloader

    two = [titan(folder, rank=r, world=2, local_batch_size=4) for r in range(2)]
    its = [iter(d) for d in two]
    for _ in range(3):
        for it in its:
            next(it)
    # torchtitan's checkpointer: dcp.save({"dataloader": <the Stateful>}) on every rank. Both ranks write the
    # same keys and values (DCP keeps one copy); here one process stands for them.
    assert two[0].state_dict() == two[1].state_dict()
    dcp.save({"dataloader": two[1]}, checkpoint_id=str(tmp_path / "step-3"), no_dist=True)
    # ... and dcp.load({"dataloader": <the Stateful>}) on every rank of the new degree: DCP's template is that
    # rank's own state_dict(), whose keys must be in the checkpoint (2 -> 4 failed with dp_rank_<r> keys).
    new = [titan(folder, rank=r, world=new_world, local_batch_size=8 // new_world) for r in range(new_world)]
    for d in new:
        dcp.load({"dataloader": d}, checkpoint_id=str(tmp_path / "step-3"), no_dist=True)
    # Together the new ranks read, step by step, exactly what the two would have read next.
    rest_two = [torch.cat([a["input"] for a, _ in pair]) for pair in zip(*its)]
    rest_new = [torch.cat([a["input"] for a, _ in step]) for step in zip(*new, strict=True)]
    assert same(rest_new, rest_two) and len(rest_two) > 5
    loaded = {"dataloader": {"tokembed": "", "world_size": 0}}
    dcp.load(loaded, checkpoint_id=str(tmp_path / "step-3"), no_dist=True)
    # torchtitan's own loader refuses the same change (its assert, torchtitan #811).
    ds = torch.utils.data.TensorDataset(torch.arange(10))
    theirs = ParallelAwareDataloader(ds, dp_rank=0, dp_world_size=2, batch_size=2)
    state = theirs.state_dict()
    with pytest.raises(AssertionError, match="dp_degree is inconsistent"):
        ParallelAwareDataloader(ds, dp_rank=0, dp_world_size=1, batch_size=2).load_state_dict(state)
    # ... and a changed global batch is named, not silently misread.
    other = titan(folder, rank=0, world=1, local_batch_size=4)
    with pytest.raises(ValueError, match=r"global_batch_size=8 \(this loader: 4\)"):
        dcp.load({"dataloader": other}, checkpoint_id=str(tmp_path / "step-3"), no_dist=True)
    with pytest.raises(ValueError, match=r"not a TitanDataLoader state: no 'tokembed' key in \['dp_world_size'\]"):
        other.load_state_dict({"dp_world_size": 2})
    # A state in the per-rank layout of earlier versions still loads (any rank's entry).
    old = titan(folder, rank=3, world=4, local_batch_size=2)
    old.load_state_dict({"dp_rank_0": loaded["dataloader"]["tokembed"], "world_size": 2})
    assert same([x["input"] for x, _ in old], [g[6:8] for g in rest_two])  # rank 3 of 4: rows 6, 7 of each step


# ------------------------------------------------------------------------------------- accelerate (one process)


def test_accelerate_prepare_dataloader_order_state_and_save_state(folder, tmp_path):
    pytest.importorskip("accelerate")
    from accelerate import Accelerator

    from tokembed.integrations.accelerate import prepare_dataloader

    def loader():
        return tokembed.create_dataloader(folder, batch_size=4, max_length=32, seed=2)

    ref, epoch1 = list(loader()), loader()
    epoch1.set_epoch(1)
    ref1 = list(epoch1)  # the loader's own order for epoch 1
    accelerator = Accelerator(cpu=True)
    dl = prepare_dataloader(accelerator, loader())
    assert isinstance(dl, DataLoader) and len(dl) == len(ref) and dl.batch_size == dl.total_batch_size == 4
    it = iter(dl)
    head = [next(it) for _ in range(3)]
    assert dl.state_dict()["batches_done"] == 3  # accelerate has fetched the 4th already: not counted
    accelerator.save_state(tmp_path / "at-0-3")
    rest = list(it)
    assert same([x for x, _ in head + rest], [x for x, _ in ref]) and same(
        [y for _, y in rest], [y for _, y in ref[3:]]
    )
    it = iter(dl)  # the next pass is epoch 1
    assert same([next(it)[0] for _ in range(2)], [x for x, _ in ref1[:2]])
    accelerator.save_state(tmp_path / "at-1-2")
    # New runs: accelerator.load_state restores the position through the registered wrapper (accelerate's own
    # set_epoch as a pass starts keeps it, in epoch 1 too).
    for ckpt, remaining in (("at-0-3", ref[3:]), ("at-1-2", ref1[2:])):
        again = Accelerator(cpu=True)
        resumed = prepare_dataloader(again, loader())
        assert again.prepare(resumed) is resumed  # already prepared: accelerate leaves it as it is
        again.load_state(tmp_path / ckpt)
        assert same([x for x, _ in resumed], [x for x, _ in remaining]), ckpt
    # accelerate's other way to resume rebuilds a DataLoader that would batch the batches again: refused.
    with pytest.raises(ValueError, match=r"skip_first_batches.*accelerator\.load_state\(dir\)"):
        next(iter(again.skip_first_batches(resumed, 2)))


def test_accelerate_prepare_of_the_dataloader_is_refused_naming_the_fix(folder):
    pytest.importorskip("accelerate")
    from accelerate import Accelerator

    from tokembed.integrations.accelerate import prepare_dataloader

    accelerator = Accelerator(cpu=True)
    dl = tokembed.create_dataloader(folder, batch_size=4, max_length=32, seed=2).as_dataloader()
    assert dl.batch_size == 4 and dl.drop_last  # what accelerate reads to build its own DataLoader
    prepared = accelerator.prepare(dl)  # accelerate builds a new DataLoader that batches our batches again
    with pytest.raises(ValueError, match=r"rank 0 of 1's share.*prepare_dataloader\(accelerator, loader\)"):
        next(iter(prepared))
    other_rank = tokembed.create_dataloader(folder, batch_size=4, max_length=32, seed=2, rank=1, world_size=2)
    with pytest.raises(ValueError, match=r"reads rank 1 of 2, but this process is 0 of 1"):
        prepare_dataloader(accelerator, other_rank)
    with pytest.raises(TypeError, match="takes a tokembed loader.*got list"):
        prepare_dataloader(accelerator, [])


def test_the_dataloader_view_reports_the_loaders_workers(folder):
    """Trainers read and log a DataLoader's num_workers (Lightning warns about too few): the view reported 0 for a
    loader that runs workers (review12)."""
    loader = tokembed.create_dataloader(folder, batch_size=4, max_length=32, seed=2, num_workers=2)
    dl = loader.as_dataloader()
    assert dl.num_workers == 2 and dl.batch_size == 4 and dl.drop_last
    plain = tokembed.create_dataloader(folder, batch_size=4, max_length=32, seed=2)
    assert [b[0].tolist() for b in dl] == [b[0].tolist() for b in plain]  # its own workers, the same batches


def test_accelerate_resume_mid_accumulation_on_a_process_the_saved_run_did_not_have(folder, tmp_path):
    """accelerate restores its accumulation step from a file per process (random_states_<i>.pkl); a process the
    saved run did not have (resumed at more processes) kept step 0 and started a new accumulation while the others
    finished theirs: their next gradient all-reduce waited forever (review9). The loader's state carries the step."""
    pytest.importorskip("accelerate")
    from accelerate import Accelerator

    from tokembed.integrations.accelerate import prepare_dataloader

    def run():
        accelerator = Accelerator(cpu=True, gradient_accumulation_steps=3)
        model = accelerator.prepare(torch.nn.Linear(2, 2))
        dl = prepare_dataloader(accelerator, tokembed.create_dataloader(folder, batch_size=4, max_length=32, seed=2))
        return accelerator, model, dl

    def steps(accelerator, model, it, n):
        flags = []
        for _ in range(n):
            x, _ = next(it)
            with accelerator.accumulate(model):
                flags.append((x[0, 0].item(), accelerator.sync_gradients))
        return flags

    accelerator, model, dl = run()
    it = iter(dl)
    steps(accelerator, model, it, 4)  # the 4th of an accumulation of 3: step 4, mid-accumulation
    accelerator.save_state(tmp_path / "mid")
    expected = steps(accelerator, model, it, 5)
    assert [s for _, s in expected] == [False, True, False, False, True]
    (tmp_path / "mid" / "random_states_0.pkl").unlink()  # what a process the saved run did not have finds
    accelerator, model, dl = run()
    accelerator.load_state(tmp_path / "mid")
    assert accelerator.step == 4
    assert steps(accelerator, model, iter(dl), 5) == expected
