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

from tokembed.shards.check import check_shards

TRIALS = int(os.environ.get("TOKEMBED_KILL_TRIALS", "3"))


def folder_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def write_corpus(d: Path, texts: list[str], *, seed: int, n_lines: int, book_copies: int) -> Path:
    """JSON Lines of 3 random paragraphs each, and a text file of ``book_copies`` shuffled copies of them."""
    rng = random.Random(seed)
    paras = [p for t in texts for p in t.split("\n\n") if p.strip()]
    with open(d / "docs.jsonl", "w", encoding="utf-8") as f:
        for _ in range(n_lines):
            f.write(json.dumps({"text": "\n\n".join(rng.sample(paras, 3))}) + "\n")
    (d / "zbook.txt").write_text("\n\n".join(rng.sample(paras, len(paras)) * book_copies), encoding="utf-8")
    return d


@pytest.fixture(scope="module")
def kill_corpus(tmp_path_factory, story, spec_texts):
    """About 1.5 MB in many small units; the text file (about 200 KB) is cut into pieces."""
    return write_corpus(
        tmp_path_factory.mktemp("killcorpus"), [story, *spec_texts], seed=0, n_lines=3000, book_copies=1
    )


@pytest.fixture(scope="module")
def large_corpus(tmp_path_factory, story, spec_texts):
    """Units of more than one part (1 MiB each), and a text document (about 2.4 MB) cut into pieces."""
    return write_corpus(
        tmp_path_factory.mktemp("killlarge"), [story, *spec_texts], seed=1, n_lines=4000, book_copies=12
    )


@pytest.fixture(scope="module")
def parquet_corpus(tmp_path_factory, story, spec_texts):
    """The JSON Lines documents as Parquet: one file in row groups of 50 rows (the workers read them), one
    in a single row group larger than a shard (the planner reads it and cuts it at rows)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = write_corpus(
        tmp_path_factory.mktemp("killparquet-src"), [story, *spec_texts], seed=2, n_lines=3000, book_copies=1
    )
    d = tmp_path_factory.mktemp("killparquet")
    texts = [json.loads(line)["text"] for line in (src / "docs.jsonl").read_text(encoding="utf-8").splitlines()]
    pq.write_table(pa.table({"text": texts[:2000]}), d / "a.parquet", row_group_size=50)
    pq.write_table(pa.table({"text": texts[2000:]}), d / "b.parquet")
    return d


@pytest.fixture(scope="module")
def zstd_corpus(tmp_path_factory, story, spec_texts):
    """The corpus compressed with zstd: JSON Lines in frames of 64 KB (as big corpora ship), the text in one."""
    import zstandard

    src = write_corpus(
        tmp_path_factory.mktemp("killzstd-src"), [story, *spec_texts], seed=3, n_lines=3000, book_copies=1
    )
    d = tmp_path_factory.mktemp("killzstd")
    c = zstandard.ZstdCompressor(level=3)
    lines = (src / "docs.jsonl").read_bytes()
    (d / "docs.jsonl.zst").write_bytes(b"".join(c.compress(lines[i : i + 65536]) for i in range(0, len(lines), 65536)))
    (d / "zbook.txt.zst").write_bytes(c.compress((src / "zbook.txt").read_bytes()))
    return d


CASES = {  # corpus fixture, shard MB, at least this many .bin files
    "many-units": ("kill_corpus", 0.05, 20),
    "parts-and-pieces": ("large_corpus", 1.2, 4),
    "parquet": ("parquet_corpus", 0.05, 20),
    "zstd": ("zstd_corpus", 0.05, 20),
}


def prepare_cmd(src: Path, out: Path, workers: int, shard_mb: float = 0.05) -> list[str]:
    return [
        sys.executable,
        "-m",
        "tokembed",
        "prepare",
        str(src),
        "--out",
        str(out),
        "--shard-mb",
        str(shard_mb),
        "--val-fraction",
        "0.1",
        "--workers",
        str(workers),
        "--quiet",
    ]


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
@pytest.mark.parametrize("case", list(CASES))
def test_kill9_at_random_moments_then_resume_is_byte_identical(case, request, tmp_path):
    fixture, shard_mb, min_files = CASES[case]
    src = request.getfixturevalue(fixture)
    ref = tmp_path / "ref"
    t0 = time.perf_counter()
    subprocess.run(prepare_cmd(src, ref, 1, shard_mb), check=True)
    full = time.perf_counter() - t0
    reference = folder_bytes(ref)
    assert len([k for k in reference if k.endswith(".bin")]) >= min_files
    rng = random.Random(int(os.environ.get("TOKEMBED_KILL_SEED", "1234")))
    killed_mid_run = 0
    for trial in range(TRIALS):
        out = tmp_path / f"t{trial}"
        workers = 1 + trial % 2
        # Up to two kills per trial, at uniform moments of a full run's duration, then a clean finish.
        for _ in range(2):
            killed = run_and_kill(prepare_cmd(src, out, workers, shard_mb), rng.uniform(0.2, full * 1.1))
            killed_mid_run += killed and not (out / "manifest.json").exists()
        subprocess.run(prepare_cmd(src, out, workers, shard_mb), check=True)
        assert folder_bytes(out) == reference, f"trial {trial}: the resumed folder differs from the uninterrupted run"
        assert check_shards(out) == []
    assert killed_mid_run >= 1  # at least one kill landed before the end
