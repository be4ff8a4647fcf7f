"""Two ranks under torchrun (gloo on the CPU): disjoint, complete shares of each epoch, exact resume."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from handmade_shards import EOT, counting_docs, write_shards
from tokembed.data.plan import rank_plan

HERE = Path(__file__).resolve().parent
TORCHRUN = Path(sys.executable).with_name("torchrun")


def run_two_ranks(root: Path, out: Path, policy: str, workers: int) -> list[dict]:
    out.mkdir()
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    cmd = [
        str(TORCHRUN),
        "--standalone",
        "--nproc_per_node",
        "2",
        str(HERE / "dist_loader_script.py"),
        str(root),
        str(out),
        policy,
        str(workers),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.slow
@pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun is not installed next to this Python")
@pytest.mark.parametrize("policy, workers", [("drop", 0), ("pad", 2)])
def test_torchrun_two_ranks_disjoint_and_complete(tmp_path, policy, workers):
    stream = write_shards(tmp_path / "shards", counting_docs([[300, 41, 7], [250], [90, 90, 90]]))
    windows = list(range(0, len(stream) - 16, 8))  # the chapter's windows over the whole stream
    ranks = run_two_ranks(tmp_path / "shards", tmp_path / "out", policy, workers)
    plan = rank_plan(len(windows), batch_size=4, world_size=2, drop_last=policy == "drop")
    for r, rec in enumerate(ranks):
        assert rec["rank"] == rec["loader_rank"] == r and rec["world"] == 2  # taken from torch.distributed
        assert rec["len"] == len(rec["epoch"]) == plan.batches
        assert rec["resumed"] == rec["epoch"]
    a, b = ([s for batch in rec["epoch"] for s in batch] for rec in ranks)
    assert set(a) <= set(windows) and set(b) <= set(windows)
    if policy == "drop":
        assert not set(a) & set(b) and len(a) == len(set(a)) and len(b) == len(set(b))  # disjoint
        assert len(a) + len(b) == len(windows) - plan.dropped_windows  # complete up to the stated tail
        assert plan.dropped_windows < 2 * 4
    else:
        assert set(a) | set(b) == set(windows)  # complete
        assert len(a) + len(b) - len(windows) == plan.padded_windows  # overlap: the stated padding only


def torchrun(n: int, *args) -> None:
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    cmd = [
        str(TORCHRUN),
        "--standalone",
        "--nproc_per_node",
        str(n),
        str(HERE / "dist_elastic_script.py"),
        *map(str, args),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun is not installed next to this Python")
def test_torchrun_mixture_saved_at_two_ranks_resumes_at_one_and_three(tmp_path):
    # Two sources whose tokens count from 0 and from 10000: a window's first tokens say which one it is.
    write_shards(tmp_path / "a", counting_docs([[300, 41, 7], [250]]))
    write_shards(tmp_path / "b", [[d + 10_000 for d in docs] for docs in counting_docs([[90, 80]])])
    out, g, cut = tmp_path / "out", 6, 5
    out.mkdir()
    torchrun(2, tmp_path / "a", tmp_path / "b", out, "save", g, cut)

    def steps(mode: str, world: int, key: str) -> list[list]:
        ranks = [json.loads((out / f"{mode}-{world}-rank{r}.json").read_text()) for r in range(world)]
        assert [rec["world"] for rec in ranks] == [world] * world  # taken from torch.distributed
        return [[w for rec in ranks for w in rec[key][t]] for t in range(len(ranks[0][key]))]  # global batches

    uninterrupted = steps("save", 2, "epoch")
    assert len(uninterrupted) == (75 + 21) // g and all(len(b) == g for b in uninterrupted)
    for world in (1, 3):
        torchrun(world, tmp_path / "a", tmp_path / "b", out, "resume", g, cut)
        assert steps("resume", world, "rest") == uninterrupted[cut:]  # the same windows, in the same global order
    sources = [int(w[0] if w[0] != EOT else w[1]) >= 10_000 for b in uninterrupted for w in b]
    assert abs(sum(sources) - 0.3 * len(sources)) < 1  # the mixture's proportion, exact
