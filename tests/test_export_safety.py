"""Exports never destroy their input, and a killed export never leaves a mismatched pair (issue 24 items 17, 18).

Was: ``export A --format megatron A/train/00000 --force`` replaced a shard's ``.idx``; kill -9 during
``export --format megatron --force`` left the new ``.bin`` beside the old ``.idx`` (4 of 23 landed kills), and hidden
``.x.bin.tmp-*`` files that nothing removed.
"""

from __future__ import annotations

import hashlib
import json
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from handmade_shards import EOT, counting_docs, write_shards
from tokembed.cli import main as cli
from tokembed.shards import megatron as mg
from tokembed.shards.export import export_megatron, export_nanogpt


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_an_export_onto_or_inside_its_input_is_refused(tmp_path, capsys):
    s = tmp_path / "A"
    write_shards(s, counting_docs([[20, 3], [7]]))
    before = tree(s)
    for fmt, out in [
        ("megatron", s / "train" / "00000"),  # the reported case: replaced train/00000.idx
        ("megatron", s / "corpus"),
        ("nanogpt", s),
        ("nanogpt", s / "train"),
        ("nanogpt", s / "nano"),
    ]:
        assert cli(["export", str(s), "--format", fmt, str(out), "--force"]) == 2
        err = capsys.readouterr().err
        assert f"is inside the input {s}; choose an output outside it" in err, err
    assert tree(s) == before
    # a Megatron prefix as the input: its own files are refused, another prefix beside them is fine
    assert cli(["export", str(s), "--format", "megatron", str(tmp_path / "m")]) == 0
    pair = tree(tmp_path)
    assert cli(["export", str(tmp_path / "m"), "--format", "megatron", str(tmp_path / "m"), "--force"]) == 2
    assert f"{tmp_path / 'm.idx'} is a file of the input {tmp_path / 'm'}" in capsys.readouterr().err
    assert tree(tmp_path) == pair
    assert cli(["export", str(tmp_path / "m"), "--format", "megatron", str(tmp_path / "m2")]) == 0
    assert (tmp_path / "m2.bin").read_bytes() == (tmp_path / "m.bin").read_bytes()


def test_an_export_through_a_symlink_onto_its_input_is_refused(tmp_path):
    s = tmp_path / "A"
    write_shards(s, counting_docs([[20, 3]]))
    (tmp_path / "link").symlink_to(s)
    before = tree(s)
    with pytest.raises(ValueError, match=r"is inside the input"):
        export_megatron(s, tmp_path / "link" / "train" / "00000", overwrite=True)
    with pytest.raises(ValueError, match=r"is inside the input"):
        export_nanogpt(tmp_path / "link", s, overwrite=True)
    assert tree(s) == before


# ------------------------------------------------------------------------------------------- kill -9

CHILD = """
import os, signal, sys
from tokembed.shards.export import export_shards
kill_at = int(sys.argv[4])
if kill_at:  # kill -9 at the kill_at-th rename: a moment random timing almost never hits
    real, calls = os.replace, [0]
    def replace(a, b):
        calls[0] += 1
        if calls[0] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(a, b)
    os.replace = replace
print("ready", flush=True)
export_shards(sys.argv[1], sys.argv[2], format=sys.argv[3], overwrite=True)
"""


def big_folder(root: Path, seed: int, n_docs: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    docs = [rng.integers(0, EOT, int(n)) for n in rng.integers(1, 4000, n_docs)]
    return write_shards(root, [docs[: n_docs // 2], docs[n_docs // 2 :]])


def start_export(src: Path, out: Path, fmt: str, kill_at: int = 0) -> subprocess.Popen:
    args = [sys.executable, "-c", textwrap.dedent(CHILD), str(src), str(out), fmt, str(kill_at)]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"
    return proc


def megatron_state(prefix: Path, streams: dict[str, np.ndarray]) -> str:
    """Which export the pair at ``prefix`` holds ("old" or "new", checked whole), or "absent" (no ``.idx``:
    Megatron and tokembed find no dataset); anything else fails the test."""
    if not mg.idx_path(prefix).exists():
        return "absent"
    index = mg.read_megatron_index(prefix)  # the .bin's size must match its .idx
    tokens = np.fromfile(mg.bin_path(prefix), dtype=index.dtype)
    side = json.loads(Path(f"{prefix}{mg.SIDECAR}").read_text())
    assert side["bin_sha256"] == hashlib.sha256(mg.bin_path(prefix).read_bytes()).hexdigest()
    for name, stream in streams.items():
        if len(tokens) == len(stream) and np.array_equal(tokens, stream):
            return name
    raise AssertionError(f"{prefix} holds neither export")


@pytest.mark.slow
def test_kill_9_during_a_forced_megatron_export_never_leaves_a_mixed_pair(tmp_path):
    old, new = tmp_path / "old", tmp_path / "new"
    streams = {"old": big_folder(old, 0, 4000), "new": big_folder(new, 1, 4500)}
    out = tmp_path / "out"
    out.mkdir()
    prefix = out / "corpus"
    t0 = time.perf_counter()
    start_export(old, prefix, "megatron").wait()
    took = time.perf_counter() - t0
    seen = set()
    rng = random.Random(0)
    # every rename of the export (kill_at = 1, 2, ...), then kill -9 at random moments
    trials = [(k, None) for k in range(1, 8)] + [(0, rng.uniform(0, took)) for _ in range(12)]
    for kill_at, delay in trials:
        export_megatron(old, prefix, overwrite=True)
        proc = start_export(new, prefix, "megatron", kill_at)
        if delay is not None:
            time.sleep(delay)
            proc.send_signal(signal.SIGKILL)
        rc = proc.wait()
        state = megatron_state(prefix, streams)
        seen.add(state if rc == -9 else "finished")
        if state == "absent":
            with pytest.raises(FileNotFoundError, match=r"an export to .*corpus was interrupted.*export again"):
                cli_open(prefix)
        # the next export finishes the job and removes every leftover
        export_megatron(new, prefix, overwrite=True)
        assert megatron_state(prefix, streams) == "new"
        assert sorted(p.name for p in out.iterdir()) == ["corpus.bin", "corpus.idx", "corpus.tokembed.json"]
    assert {"old", "absent"} <= seen  # the kills landed before and inside the renames


def cli_open(prefix: Path):
    import tokembed

    return tokembed.open_shards(prefix)


@pytest.mark.slow
def test_a_first_export_killed_inside_its_renames_is_finished_by_the_rerun(tmp_path):
    src = tmp_path / "src"
    stream = big_folder(src, 2, 300)
    for kill_at in range(1, 7):
        out = tmp_path / f"out{kill_at}"
        out.mkdir()
        rc = start_export(src, out / "corpus", "megatron", kill_at).wait()
        assert megatron_state(out / "corpus", {"new": stream}) in ("absent", "new")
        if rc == -9:  # the same command again, without --force: tokembed's own interrupted export is finished
            assert cli(["export", str(src), "--format", "megatron", str(out / "corpus")]) == 0
        else:
            assert rc == 0
        assert megatron_state(out / "corpus", {"new": stream}) == "new"
        assert sorted(p.name for p in out.iterdir()) == ["corpus.bin", "corpus.idx", "corpus.tokembed.json"]


def with_val(root: Path, seed: int, n_docs: int) -> tuple[np.ndarray, np.ndarray]:
    """A folder with a train and a val split (each written by hand, see handmade_shards)."""
    train = big_folder(root, seed, n_docs)
    val = big_folder(root.with_name(root.name + "-val"), seed + 100, n_docs // 4)
    manifest = json.loads((root / "manifest.json").read_text())
    (root.with_name(root.name + "-val") / "train").rename(root / "val")
    shards = json.loads((root.with_name(root.name + "-val") / "manifest.json").read_text())["splits"]["train"]
    for s in shards["shards"]:
        s["tokens"], s["index"] = s["tokens"].replace("train/", "val/"), s["index"].replace("train/", "val/")
    manifest["splits"]["val"] = shards
    (root / "manifest.json").write_text(json.dumps(manifest))
    return train, val


@pytest.mark.slow
def test_kill_9_during_a_forced_nanogpt_export_never_mixes_two_exports(tmp_path):
    old, new = with_val(tmp_path / "old", 3, 600), with_val(tmp_path / "new", 4, 700)
    out = tmp_path / "nano"
    for kill_at in range(1, 8):
        export_nanogpt(tmp_path / "old", out, overwrite=True)
        start_export(tmp_path / "new", out, "nanogpt", kill_at).wait()
        if (out / "train.bin").exists():  # nanoGPT finds a dataset: every file of it from one export
            got = [np.fromfile(out / f"{s}.bin", dtype=np.uint16) for s in ("train", "val")]
            assert any(all(np.array_equal(g, w) for g, w in zip(got, want)) for want in (old, new))
        export_nanogpt(tmp_path / "new", out, overwrite=True)
        assert np.array_equal(np.fromfile(out / "train.bin", dtype=np.uint16), new[0])
        assert sorted(p.name for p in out.iterdir()) == ["meta.pkl", "train.bin", "val.bin"]
