"""transformers' Trainer on `HFWindows` in two processes (torchrun, gloo on the CPU), with gradient accumulation
and an epoch that does not divide into the processes' batches: accelerate deals batch ``2i + r`` to rank ``r``
and wraps rank 1's last one around to the epoch's start (``even_batches``). References: tokembed's order
(as accelerate deals it out), and tokembed's own loader restored from the checkpoint's file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tokembed

transformers = pytest.importorskip("transformers")
from tokembed.integrations.hf import HFWindows  # noqa: E402

HERE = Path(__file__).resolve().parent
TORCHRUN = Path(sys.executable).with_name("torchrun")


def trainer_run(tmp_path: Path, output_dir: str, max_steps: int, name: str, resume: Path | None = None) -> list[list]:
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    script = [str(HERE / "dist_hf_script.py"), str(tmp_path / output_dir), str(max_steps), str(tmp_path / name)]
    cmd = [str(TORCHRUN), "--standalone", "--nproc_per_node", "2", *script, *([str(resume)] if resume else [])]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads((tmp_path / f"{name}-rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.slow
@pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun is not installed next to this Python")
def test_two_processes_with_accumulation_resume_where_the_trainer_stopped(tmp_path):
    # 2 steps an epoch: 3 batches a rank, accumulated 2 at a time; 5 steps run epochs 0, 1 and half of 2
    tokens = np.arange(330) % 997
    ds = HFWindows(tokens, max_length=32, seed=4)
    orders = [ds.dataset.gather(ds.windows(range(10), epoch=e))[0][:, 0].tolist() for e in range(3)]

    def batch(e: int, g: int) -> list[int]:  # global batch g of epoch e (5 an epoch: g = 5 wraps to 0)
        return orders[e][2 * (g % 5) : 2 * (g % 5) + 2]

    # what the uninterrupted run trains on (each window named by its first token): tokembed's order
    uninterrupted = [[batch(e, 2 * i + r) for e in range(3) for i in range(3)][:8] for r in range(2)]
    cut = trainer_run(tmp_path, "cut", 3, "cut")
    assert cut == [r[:5] for r in uninterrupted]  # epoch 0's 3 batches, then one step of 2 in epoch 1
    saved = json.loads((tmp_path / "cut" / "checkpoint-3" / "tokembed_loader.json").read_text())
    # tokembed's own loader restored from the file reads on where rank 0 does
    loader = tokembed.create_dataloader(tokens, batch_size=1, max_length=32, seed=4)
    loader.load_state_dict(saved)
    it = iter(loader)
    assert [int(next(it)[0][0, 0]) for _ in range(2)] == uninterrupted[0][5]
    rest = trainer_run(tmp_path, "cut", 5, "rest", resume=tmp_path / "cut" / "checkpoint-3")
    assert [c + r for c, r in zip(cut, rest)] == uninterrupted
