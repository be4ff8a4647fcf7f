"""Elastic resume from the command line: the global batch is what must match, not the per-rank batch.

Was (issue 24 item 2): a run of ``torchrun --nproc_per_node 2 ... train --batch-size 8`` could not be resumed
by one process: without ``--batch-size`` the loader refused (global batch 16 vs 8), with ``--batch-size 16``
the training setup refused (batch_size 8 -> 16).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import STORY

TORCHRUN = Path(sys.executable).with_name("torchrun")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun is not installed next to this Python"),
]


def run(world: int, out: Path, *extra: str) -> None:
    """``tokembed train`` in one process, or under torchrun with ``world`` ranks (gloo, CPU)."""
    args = [
        "train", str(STORY), "--out", str(out), "--dim", "16", "--layers", "1", "--heads", "2",
        "--max-length", "16", "--steps", "6", "--eval-interval", "2", "--eval-batches", "1",
        "--checkpoint-interval", "100", "--warmup-steps", "2", "--device", "cpu", "--quiet", *extra,
    ]  # fmt: skip
    head = [sys.executable, "-m", "tokembed"]
    if world > 1:
        head = [str(TORCHRUN), "--standalone", "--nproc_per_node", str(world), "-m", "tokembed"]
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run([*head, *args], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


def losses(out: Path) -> tuple[list, list]:
    log = json.loads((out / "log.json").read_text())
    return [e["loss"] for e in log["train"]], [e["loss"] for e in log["val"]]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[list, list]:
    out = tmp_path_factory.mktemp("elastic") / "whole"
    run(1, out, "--global-batch-size", "6")
    return losses(out)


def same(got: tuple[list, list], want: tuple[list, list]) -> bool:
    """Equal up to the order of the ranks' float sums (one process adds the same numbers in another order)."""
    return len(got[0]) == len(want[0]) == 6 and got == (
        pytest.approx(want[0], rel=1e-5),
        pytest.approx(want[1], rel=1e-5),
    )


def test_two_ranks_resumed_by_one_process(tmp_path, reference):
    out = tmp_path / "run"
    run(2, out, "--global-batch-size", "6", "--stop-at", "3")
    run(1, out, "--resume")  # the global batch comes from the checkpoint: 6 windows in one process
    assert same(losses(out), reference)
    state = json.loads((out / "state.json").read_text())["loader"]["config"]
    assert (state["world_size"], state["batch_size"], state["global_batch_size"]) == (1, 6, 6)


def test_one_process_then_two_then_three_ranks(tmp_path, reference):
    out = tmp_path / "run"
    run(1, out, "--global-batch-size", "6", "--stop-at", "2")
    run(2, out, "--resume", "--stop-at", "4")
    run(3, out, "--resume", "--batch-size", "2")  # a per-rank batch is accepted when 2 x 3 ranks make 6
    assert same(losses(out), reference)


def test_a_per_rank_batch_that_changes_the_global_batch_is_refused(tmp_path):
    out = tmp_path / "run"
    run(1, out, "--batch-size", "4", "--stop-at", "1")
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    cmd = [str(TORCHRUN), "--standalone", "--nproc_per_node", "2", "-m", "tokembed", "train", "--out", str(out)]
    proc = subprocess.run([*cmd, "--resume", "--batch-size", "4", "--quiet"], env=env, capture_output=True, text=True)
    assert proc.returncode != 0
    assert "global batch of 4 windows" in proc.stderr and "8 windows (batch_size 4 x 2 ranks)" in proc.stderr
    assert "--global-batch-size 4" in proc.stderr or "--batch-size 2" in proc.stderr
