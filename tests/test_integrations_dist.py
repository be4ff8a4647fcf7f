"""The trainer drop-ins across real processes (torchrun, gloo on the CPU): torchtitan's own CheckpointManager
resuming a `TitanDataLoader` at fewer and more data-parallel ranks, and accelerate's Accelerator feeding each
process its own rank's batches. References: the uninterrupted run, and tokembed's loader at each rank."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from handmade_shards import write_cut_stream

HERE = Path(__file__).resolve().parent
TORCHRUN = Path(sys.executable).with_name("torchrun")


@pytest.fixture
def folder(tmp_path):
    rng = np.random.default_rng(9)
    docs = [rng.integers(0, 50000, n).tolist() for n in rng.integers(3, 80, 120)]
    write_cut_stream(tmp_path / "shards", docs, cuts=[1500, 3000])
    return tmp_path / "shards"


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
