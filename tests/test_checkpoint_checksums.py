"""A checkpoint's sha256.json is required and vouches for itself; a damaged file is the one named (issue 24 item 20).

Was: a checkpoint whose sha256.json was deleted, emptied or lacked the model's entry loaded unverified with no
notice (after the weights were altered, ``inspect`` and ``eval`` answered differently with exit 0), and in 4 of 130
trials the error named another file than the damaged one.
"""

from __future__ import annotations

import json
import random
import shutil

import pytest

from conftest import STORY
from tokembed import TrainConfig, load_checkpoint, train
from tokembed.cli import main
from tokembed.inspection.table import EmbeddingTable
from tokembed.model.checkpoint import verify_checkpoint

# The story as bytes (257 ids): checksums are what is tested, and a 257-row checkpoint is copied, hashed and
# resumed far faster than one of 50,257 rows.
TINY = {"context_length": 16, "dim": 16, "n_layers": 1, "n_heads": 2}


def cfg(root, **kw):
    base = dict(data=str(STORY), out=str(root / "run"), max_length=16, batch_size=4, max_steps=2, tokenizer="bytes")
    return TrainConfig(**{**base, "eval_interval": 2, "eval_batches": 1, "checkpoint_interval": 2, **kw})


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    root = tmp_path_factory.mktemp("sums")
    train(cfg(root, keep_checkpoints=1), TINY, progress=False)
    return root / "run"


@pytest.fixture
def ckpt(saved, tmp_path):
    return shutil.copytree(saved, tmp_path / "run")


def flip(path, pos: int, bit: int) -> None:
    b = bytearray(path.read_bytes())
    b[pos] ^= 1 << bit
    path.write_bytes(bytes(b))


def other_files_named(message: str, ckpt, name: str) -> list[str]:
    return [p.name for p in ckpt.iterdir() if p.name != name and f"run/{p.name}" in message]


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda c: (c / "sha256.json").unlink(), r"has no sha256.json: every checkpoint tokembed writes has one"),
        (lambda c: (c / "sha256.json").write_text(""), r"run/sha256.json is damaged"),
        (lambda c: (c / "sha256.json").write_text("{}"), r"run/sha256.json is damaged"),
    ],
    ids=["deleted", "emptied", "empty-object"],
)
def test_a_missing_or_emptied_sha256_json_is_an_error(ckpt, damage, message, capsys):
    damage(ckpt)
    flip(ckpt / "model.safetensors", (ckpt / "model.safetensors").stat().st_size - 3, 6)  # and a weight altered
    with pytest.raises(ValueError, match=message):
        load_checkpoint(ckpt)
    with pytest.raises(ValueError, match=message):
        train(cfg(ckpt.parent, max_steps=3), resume=True, progress=False)
    for command in (["eval", str(ckpt), "--lengths", "16"], ["inspect", str(ckpt), "info"]):
        assert main(command) == 2  # was: exit 0 with other answers
        assert "sha256.json" in capsys.readouterr().err


def test_a_sha256_json_that_leaves_out_a_file_is_incomplete(ckpt):
    sums = json.loads((ckpt / "sha256.json").read_text())
    del sums["files"]["model.safetensors"]
    from tokembed.model.checkpoint import _checksum_document

    (ckpt / "sha256.json").write_text(json.dumps(_checksum_document(sums["files"])))  # well sealed, but short
    with pytest.raises(ValueError, match=r"run/sha256.json is incomplete: it lists no model.safetensors"):
        load_checkpoint(ckpt)
    with pytest.raises(ValueError, match=r"run/sha256.json is incomplete"):
        EmbeddingTable.from_checkpoint(ckpt)


def test_pre_0_2_checkpoints_load_with_the_explicit_option(ckpt, capsys):
    (ckpt / "sha256.json").unlink()  # as tokembed 0.1 wrote them, before checksums
    with pytest.warns(UserWarning, match=r"has no sha256.json: loaded without verification"):
        model, config = load_checkpoint(ckpt, allow_unverified=True)
    assert config["step"] == 2 and verify_checkpoint(ckpt, allow_unverified=True) is False
    assert main(["eval", str(ckpt), "--lengths", "16", "--max-windows", "2", "--allow-unverified"]) == 0
    assert main(["inspect", str(ckpt), "info", "--allow-unverified"]) == 0
    capsys.readouterr()
    train(cfg(ckpt.parent, max_steps=3), resume=True, progress=False, allow_unverified=True)
    assert verify_checkpoint(ckpt)  # the checkpoint written now has its sha256.json


@pytest.mark.slow
def test_the_damaged_file_is_the_one_named(ckpt, tmp_path):
    """One bit flipped anywhere in any file: every reader names that file and no other."""
    pristine = tmp_path / "pristine"
    shutil.copytree(ckpt, pristine)
    readers = {
        "load": lambda: load_checkpoint(ckpt),
        "inspect": lambda: EmbeddingTable.from_checkpoint(ckpt),
        "resume": lambda: train(cfg(ckpt.parent, max_steps=3), resume=True, progress=False),
    }
    rng = random.Random(0)
    names = sorted(p.name for p in ckpt.iterdir())
    assert "sha256.json" in names and "token_counts.safetensors" in names
    for name in names:
        size = (ckpt / name).stat().st_size
        for _ in range(4):
            flip(ckpt / name, rng.randrange(size), rng.randrange(8))
            for what, read in readers.items():
                with pytest.raises((ValueError, OSError)) as e:
                    read()
                assert f"run/{name}" in str(e.value), (name, what, str(e.value))
                assert other_files_named(str(e.value), ckpt, name) == [], (name, what, str(e.value))
            shutil.copy2(pristine / name, ckpt / name)
