"""kill -9 at random moments, then resume: the finished folder is byte-identical to an uninterrupted run.

A handful of trials in the normal run; ``TOKEMBED_KILL_TRIALS=50`` for many more.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tokembed.shards import check_shards

TRIALS = int(os.environ.get("TOKEMBED_KILL_TRIALS", "3"))


def folder_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def kill_corpus(tmp_path_factory, story, spec_texts):
    d = tmp_path_factory.mktemp("killcorpus")
    rng = random.Random(0)
    paras = [p for t in [story, *spec_texts] for p in t.split("\n\n") if p.strip()]
    with open(d / "docs.jsonl", "w", encoding="utf-8") as f:
        for i in range(3000):  # about 1.5 MB
            f.write(json.dumps({"text": "\n\n".join(rng.sample(paras, 3))}) + "\n")
    (d / "story.txt").write_text(story, encoding="utf-8")
    return d


def prepare_cmd(src: Path, out: Path, workers: int) -> list[str]:
    return [sys.executable, "-m", "tokembed", "prepare", str(src), "--out", str(out), "--shard-mb", "0.05",
            "--val-fraction", "0.1", "--workers", str(workers), "--quiet"]


def run_and_kill(cmd: list[str], after: float) -> bool:
    """Start ``cmd`` in its own process group and SIGKILL the whole group after ``after`` seconds.
    Returns True when it was killed (False when it had already finished)."""
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        proc.wait(timeout=after)
        return False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the group we started: main process and its workers, like a power cut
        proc.wait()
        return True


@pytest.mark.slow
def test_kill9_at_random_moments_then_resume_is_byte_identical(kill_corpus, tmp_path):
    ref = tmp_path / "ref"
    t0 = time.perf_counter()
    subprocess.run(prepare_cmd(kill_corpus, ref, 1), check=True)
    full = time.perf_counter() - t0
    reference = folder_bytes(ref)
    assert len([k for k in reference if k.endswith(".bin")]) >= 20
    rng = random.Random(int(os.environ.get("TOKEMBED_KILL_SEED", "1234")))
    killed_mid_run = 0
    for trial in range(TRIALS):
        out = tmp_path / f"t{trial}"
        workers = 1 + trial % 2
        # Up to two kills per trial, at uniform moments of a full run's duration, then a clean finish.
        for _ in range(2):
            killed = run_and_kill(prepare_cmd(kill_corpus, out, workers), rng.uniform(0.2, full * 1.1))
            killed_mid_run += killed and not (out / "manifest.json").exists()
        subprocess.run(prepare_cmd(kill_corpus, out, workers), check=True)
        assert folder_bytes(out) == reference, f"trial {trial}: the resumed folder differs from the uninterrupted run"
        assert check_shards(out) == []
    assert killed_mid_run >= 1  # at least one kill landed before the end
