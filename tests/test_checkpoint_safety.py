"""Checkpoint saves remove only what tokembed wrote, and keep the last K checkpoints (issue 24 items 16 and 5).

Was: every save deleted sibling folders named ``CKPT.tmp-*`` and ``CKPT.old-*`` by pattern (a user's
``runs/tiny.old-backup/`` was gone after ``train --resume``, ``runs/fresh.tmp-mydata/`` after a fresh run), and the
files a user put inside a checkpoint folder (or that ``export run run`` wrote there) were gone at the next save.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import STORY
from tokembed import TrainConfig, load_checkpoint, train
from tokembed.cli import main
from tokembed.model.checkpoint import verify_checkpoint

# The story as bytes (257 ids): saves are what is tested, and a 257-row table saves far faster than 50,257 rows.
TINY = {"context_length": 16, "dim": 16, "n_layers": 1, "n_heads": 2}


def cfg(root, name="run", **kw):
    base = dict(data=str(STORY), out=str(root / name), max_length=16, batch_size=4, max_steps=2, tokenizer="bytes")
    return TrainConfig(**{**base, "eval_interval": 100, "eval_batches": 1, "checkpoint_interval": 1, **kw})


def tree(root) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def user_folder(path, text="mine"):
    path.mkdir(parents=True)
    (path / "notes.txt").write_text(text)
    (path / "model.safetensors").write_text("not a checkpoint's: the user's own file of this name")
    return tree(path)


@pytest.mark.slow
def test_saves_never_touch_sibling_folders_that_only_look_like_leftovers(tmp_path):
    names = ["run.old-backup", "run.tmp-mydata", "run.step-0000001", "run.old-x"]
    before = {n: user_folder(tmp_path / n) for n in names}
    (tmp_path / "run.old-x" / "ckpt").mkdir()  # shaped like an older tokembed's leftover, but made by the user
    before["run.old-x"] = tree(tmp_path / "run.old-x")
    train(cfg(tmp_path), TINY, progress=False)  # a fresh run: two saves
    train(cfg(tmp_path, max_steps=4), resume=True, progress=False)  # two more
    for n in names:
        assert tree(tmp_path / n) == before[n], n
    assert json.loads((tmp_path / "run" / "state.json").read_text())["step"] == 4


def test_files_put_inside_a_checkpoint_survive_the_next_saves(tmp_path):
    train(cfg(tmp_path), TINY, progress=False)
    run = tmp_path / "run"
    (run / "notes.md").write_text("why this run matters")
    (run / "eval").mkdir()
    (run / "eval" / "results.json").write_text("{}")
    (run / "notes.md.tmp-draft").write_text("a user's draft")
    train(cfg(tmp_path, max_steps=4), resume=True, progress=False)  # two saves
    assert (run / "notes.md").read_text() == "why this run matters"
    assert (run / "eval" / "results.json").read_text() == "{}"
    assert (run / "notes.md.tmp-draft").read_text() == "a user's draft"
    assert verify_checkpoint(run)
    assert load_checkpoint(run)[1]["step"] == 4


def test_exports_into_a_checkpoint_are_refused(tmp_path, capsys):
    train(cfg(tmp_path, max_steps=1), TINY, progress=False)
    run = tmp_path / "run"
    before = tree(run)
    for out in (run, run / "table.npy", run / "sub" / "proj"):
        assert main(["export", str(run), str(out)]) == 2
        err = capsys.readouterr().err
        assert f"{out} is inside the checkpoint {run}" in err, err
        assert "choose an output outside it" in err
    assert tree(run) == before
    assert not (run / "sub").exists()
    assert main(["export", str(run), str(tmp_path / "table.npy")]) == 0  # beside it: fine


def test_prepare_and_shard_exports_into_a_checkpoint_are_refused(tmp_path, capsys):
    train(cfg(tmp_path, max_steps=1), TINY, progress=False)
    run = tmp_path / "run"
    before = tree(run)
    shards = tmp_path / "shards"
    assert main(["prepare", str(STORY), "--out", str(shards), "-q", "--workers", "1"]) == 0
    assert main(["export", str(shards), "--format", "nanogpt", str(run)]) == 2
    assert f"{run} is inside the checkpoint {run}" in capsys.readouterr().err
    assert main(["export", str(shards), "--format", "megatron", str(run / "corpus")]) == 2
    assert "is inside the checkpoint" in capsys.readouterr().err
    assert main(["prepare", str(STORY), "--out", str(run / "shards"), "-q"]) == 2
    assert "is inside the checkpoint" in capsys.readouterr().err
    assert tree(run) == before


KILLED_SAVE = """
import os, signal, sys
from tokembed import GPT, GPTConfig
from tokembed.model.checkpoint import save_checkpoint

def die(path):
    path.write_bytes(b"half")
    os.kill(os.getpid(), signal.SIGKILL)  # kill -9 in the middle of the save, after most files are written

save_checkpoint(sys.argv[1], GPT(GPTConfig(context_length=8, dim=8, n_layers=1, n_heads=2)), extra_files={"x.bin": die})
"""


@pytest.mark.slow
def test_a_killed_save_leaves_a_marked_folder_that_the_next_save_removes(tmp_path):
    train(cfg(tmp_path, max_steps=1), TINY, progress=False)
    user = user_folder(tmp_path / "run.tmp-mydata")
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(KILLED_SAVE), str(tmp_path / "run")])
    assert proc.returncode == -9
    left = [p for p in tmp_path.glob("run.tmp-*") if p.name != "run.tmp-mydata"]
    assert len(left) == 1 and (left[0] / "model.safetensors").is_file()  # the real leftover of a killed save
    train(cfg(tmp_path, max_steps=2, keep_checkpoints=1), resume=True, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "run.tmp-mydata"]
    assert tree(tmp_path / "run.tmp-mydata") == user


@pytest.mark.slow
def test_the_last_k_checkpoints_are_kept_and_each_loads(tmp_path, capsys):
    train(cfg(tmp_path, max_steps=5, keep_checkpoints=3), TINY, progress=False)
    kept = sorted(p.name for p in tmp_path.iterdir())
    assert kept == ["run", "run.step-0000003", "run.step-0000004"]
    for name, step in (("run", 5), ("run.step-0000004", 4), ("run.step-0000003", 3)):
        assert verify_checkpoint(tmp_path / name)
        assert load_checkpoint(tmp_path / name)[1]["step"] == step
    assert main(["eval", str(tmp_path / "run.step-0000004"), "--lengths", "16", "--max-windows", "2"]) == 0
    capsys.readouterr()
    # --keep 1: only the latest (and the kept ones of before are pruned at the next save)
    train(cfg(tmp_path, max_steps=6, keep_checkpoints=1), resume=True, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_keep_from_the_command_line(tmp_path, capsys):
    args = ["train", str(STORY), "--out", str(tmp_path / "run"), "--steps", "3", "--checkpoint-interval", "1"]
    args += ["--max-length", "16", "--batch-size", "4", "--dim", "16", "--layers", "1", "--heads", "2", "--keep", "2"]
    assert main(args) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "run.step-0000002"]


def test_keep_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match=r"keep_checkpoints must be >= 1, got 0"):
        cfg(tmp_path, keep_checkpoints=0)


def losses(run) -> list[tuple[int, float]]:
    return [(e["step"], e["loss"]) for e in json.loads((run / "log.json").read_text())["train"]]


@pytest.mark.slow
def test_resume_takes_the_newest_complete_checkpoint(tmp_path):
    """A save killed between its renames leaves no CKPT, or a damaged CKPT: resume continues the newest complete
    kept one, and says so; the damaged one is moved aside, never deleted."""
    train(cfg(tmp_path, max_steps=3, keep_checkpoints=2), TINY, progress=False)
    reference = tmp_path / "ref"
    train(cfg(tmp_path, name="ref", max_steps=4), TINY, progress=False)
    run = tmp_path / "run"
    # the newest is damaged: resume warns, keeps the damaged folder aside and continues step 2's checkpoint
    b = bytearray((run / "model.safetensors").read_bytes())
    b[-3] ^= 4
    (run / "model.safetensors").write_bytes(bytes(b))
    with pytest.warns(UserWarning, match=r"checkpoint .*run is damaged .*model.safetensors.*resuming from .*step 2"):
        train(cfg(tmp_path, max_steps=4, keep_checkpoints=2), resume=True, progress=False)
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("run.damaged-")]
    assert len(aside) == 1 and (aside[0] / "model.safetensors").read_bytes() == bytes(b)
    assert losses(run) == losses(reference)  # exact resume from step 2
    # no CKPT at all (killed between the renames): the kept one is taken
    os.rename(run, tmp_path / "gone")
    with pytest.warns(UserWarning, match=r"resuming from .*run.step-0000003"):
        train(cfg(tmp_path, max_steps=4, keep_checkpoints=2), resume=True, progress=False)
    assert load_checkpoint(run)[1]["step"] == 4
