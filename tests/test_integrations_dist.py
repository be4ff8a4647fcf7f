"""The trainer drop-ins across real processes (torchrun, gloo on the CPU): torchtitan's own CheckpointManager
resuming a `TitanDataLoader` at fewer and more data-parallel ranks, and accelerate's Accelerator feeding each
process its own rank's batches. References: the uninterrupted run, and tokembed's loader at each rank."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from handmade_shards import small_corpus
from tokembed.data.plan import rank_plan

HERE = Path(__file__).resolve().parent
TORCHRUN = Path(sys.executable).with_name("torchrun")


@pytest.fixture
def folder(tmp_path):
    return small_corpus(tmp_path / "shards")


def torchrun(n: int, script: str, *args) -> subprocess.CompletedProcess:
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    cmd = [str(TORCHRUN), "--standalone", "--nproc_per_node", str(n), str(HERE / script), *map(str, args)]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)


def records(out: Path, mode: str, world: int) -> list[dict]:
    return [json.loads((out / f"{mode}-{world}-rank{r}.json").read_text()) for r in range(world)]


def global_steps(ranks: list[dict], key: str) -> list[list]:
    """Each step's global batch: the ranks' batches of that step, in rank order."""
    assert len({len(rec[key]) for rec in ranks}) == 1, [len(rec[key]) for rec in ranks]
    return [[w for rec in ranks for w in rec[key][t]] for t in range(len(ranks[0][key]))]


@pytest.mark.slow
@pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun is not installed next to this Python")
def test_torchtitan_checkpoint_manager_resumes_at_fewer_and_more_ranks(folder, tmp_path):
    pytest.importorskip("torchtitan")
    out = tmp_path / "out"
    out.mkdir()
    proc = torchrun(2, "dist_titan_script.py", folder, tmp_path / "ckpt", "save", 4, out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    uninterrupted = global_steps(records(out, "save", 2), "rest")
    assert len(uninterrupted) > 5
    for world in (4, 1, 2):  # global batch 8 at each degree: grow, shrink, same
        proc = torchrun(world, "dist_titan_script.py", folder, tmp_path / "ckpt", "load", 8 // world, out)
        assert proc.returncode == 0, f"dp {world}: {proc.stderr[-3000:]}"
        assert global_steps(records(out, "load", world), "rest") == uninterrupted, world


@pytest.mark.slow
@pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun is not installed next to this Python")
def test_accelerate_each_process_reads_its_rank_and_resumes_at_other_process_counts(folder, tmp_path):
    pytest.importorskip("accelerate")
    import tokembed

    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    out.mkdir()
    proc = torchrun(2, "dist_accelerate_script.py", folder, ckpt, "save", 8, out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    saved = records(out, "save", 2)
    for r, rec in enumerate(saved):
        # Exactly this rank's batches (tokembed's loader at rank r of 2, read here without accelerate).
        mine = [
            x[:, :2].tolist()
            for x, _ in tokembed.create_dataloader(folder, batch_size=4, max_length=32, seed=2, rank=r, world_size=2)
        ]
        assert rec["rank"] == rec["loader_rank"] == r and rec["world"] == 2
        assert rec["head"] + rec["rest"] == mine and rec["len"] == len(mine)
        assert rec["batch_size"] == 4 and rec["total_batch_size"] == 8 and rec["is_dataloader"]
        assert rec["ends"] == [False] * (len(rec["rest"]) - 1) + [True]  # accelerate sees the epoch's end
    uninterrupted = global_steps(saved, "rest")
    for world in (1, 2):  # accelerator.load_state at fewer and the same number of processes (global batch 8)
        proc = torchrun(world, "dist_accelerate_script.py", folder, ckpt, "load", 8, out)
        assert proc.returncode == 0, f"{world} processes: {proc.stderr[-3000:]}"
        assert global_steps(records(out, "load", world), "rest") == uninterrupted, world
    # drop_last=False: the last step is shared out, padded with the epoch's first windows; gather_for_metrics
    # keeps the genuine ones: each window of the epoch exactly once, the global order of one process's loader.
    proc = torchrun(2, "dist_accelerate_script.py", folder, ckpt, "metrics", 8, out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    whole = tokembed.create_dataloader(
        folder, batch_size=8, max_length=31, seed=2, drop_last=False, rank=0, world_size=1
    )
    two = rank_plan(whole.plan.windows, batch_size=4, world_size=2, drop_last=False)
    assert two.padded_windows == 1 and two.last_batch_size == 2  # the last step: 3 windows and 1 of padding
    epoch = [x[:, :2].tolist() for x, _ in whole]
    for rec in records(out, "metrics", 2):
        assert rec["gathered"] == epoch
    # accelerator.prepare(loader.as_dataloader()) would shard the ranks' batches again: refused, naming the fix.
    proc = torchrun(2, "dist_accelerate_script.py", folder, ckpt, "prepare", 8, out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for rec in records(out, "prepare", 2):
        assert "prepare_dataloader(accelerator, loader)" in rec["error"] and "rank" in rec["error"]
