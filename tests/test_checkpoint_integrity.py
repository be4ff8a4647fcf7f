"""A damaged checkpoint is an error naming the file, never a silently different model (issue 16, items 4 and 13).

Was: one flipped bit in model.safetensors (a bias became 9.2e36) resumed with exit 0 and a final loss of
10.58 instead of 8.73; a damaged header, a truncated file or a broken state.json printed tracebacks.
"""

from __future__ import annotations

import json
import os
import random
import shutil

import pytest

from conftest import STORY, TINY
from tokembed import TrainConfig, load_checkpoint, train
from tokembed.cli import main
from tokembed.model.checkpoint import verify_checkpoint

FILES = ["config.json", "model.safetensors", "optimizer.pt", "state.json", "log.json"]


def cfg(tmp_path, name="run", **kw):
    base = dict(data=str(STORY), out=str(tmp_path / name), max_length=16, batch_size=4, max_steps=3)
    return TrainConfig(**{**base, "eval_interval": 3, "eval_batches": 2, "checkpoint_interval": 3, **kw})


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    train(cfg(root, max_steps=2), TINY, progress=False)
    assert verify_checkpoint(root / "run")
    return root / "run"


@pytest.fixture
def ckpt(saved, tmp_path):
    return shutil.copytree(saved, tmp_path / "run")


def flip(path, pos: int, bit: int) -> None:
    b = bytearray(path.read_bytes())
    b[pos] ^= 1 << bit
    path.write_bytes(bytes(b))


@pytest.mark.parametrize("name", FILES)
def test_one_flipped_bit_anywhere_is_named(ckpt, name, capsys):
    rng = random.Random(name)
    original = (ckpt / name).read_bytes()
    for _ in range(3):
        (ckpt / name).write_bytes(original)
        flip(ckpt / name, rng.randrange(len(original)), rng.randrange(8))
        with pytest.raises(
            ValueError, match=rf"checkpoint file .*run/{name} is (damaged|missing)|{name} is not valid JSON"
        ):
            load_checkpoint(ckpt)
            verify_checkpoint(ckpt)  # config.json may still parse and load: the checksums catch it
        # A config.json that no longer describes the run is refused by the resume checks (by field) first.
        with pytest.raises(ValueError, match="" if name == "config.json" else rf"checkpoint file .*run/{name}"):
            train(cfg(ckpt.parent, max_steps=3), resume=True, progress=False)
    assert main(["eval", str(ckpt)]) == 2
    assert f"run/{name}" in capsys.readouterr().err


def test_a_flipped_weight_is_caught_by_inspect_and_eval(ckpt, capsys):
    flip(ckpt / "model.safetensors", (ckpt / "model.safetensors").stat().st_size - 3, 6)  # inside a tensor
    assert main(["inspect", str(ckpt), "info"]) == 2
    assert "model.safetensors is damaged (its sha256 differs" in capsys.readouterr().err
    assert main(["eval", str(ckpt)]) == 2
    assert "model.safetensors is damaged" in capsys.readouterr().err


@pytest.mark.parametrize(
    "name, damage",
    [
        ("model.safetensors", lambda b: b"\xff" * 8 + b[8:]),  # the header's length
        ("model.safetensors", lambda b: b[: len(b) // 2]),  # truncated
        ("optimizer.pt", lambda b: b[: len(b) // 3]),
        ("state.json", lambda b: b.replace(b'"step"', b"step", 1)),  # Expecting property name ...
        ("state.json", lambda b: b.replace(b'"rng"', b'"rnq"', 1)),
    ],
    ids=["header", "truncated", "optimizer", "state-json", "state-key"],
)
def test_checkpoints_without_checksums_still_name_a_damaged_file(ckpt, name, damage):
    (ckpt / "sha256.json").unlink()  # as written before checksums existed: read unverified, when asked to
    with pytest.warns(UserWarning, match="loaded without verification"):
        assert verify_checkpoint(ckpt, allow_unverified=True) is False
    (ckpt / name).write_bytes(damage((ckpt / name).read_bytes()))
    with pytest.raises(ValueError, match=rf"checkpoint file .*run/{name} is damaged \(.*\); restore the checkpoint"):
        if name == "model.safetensors":
            load_checkpoint(ckpt, allow_unverified=True)
        train(cfg(ckpt.parent, max_steps=3), resume=True, progress=False, allow_unverified=True)


def test_files_follow_the_umask_and_a_folder_named_like_a_killed_save_is_kept(ckpt):
    mask = os.umask(0)
    os.umask(mask)
    assert ckpt.stat().st_mode & 0o777 == 0o777 & ~mask  # was 0700 (mkdtemp)
    assert {p.name: p.stat().st_mode & 0o777 for p in ckpt.iterdir()} == dict.fromkeys(
        [p.name for p in ckpt.iterdir()], 0o666 & ~mask
    )
    # Named like a killed save, but without tokembed's marker: a user's folder, kept (a real killed save is
    # removed: tests/test_checkpoint_safety.py). The previous checkpoint is kept beside (--keep, default 3).
    (ckpt.parent / "run.tmp-killed").mkdir()
    (ckpt.parent / "run.tmp-killed" / "model.safetensors").write_bytes(b"partial")
    train(cfg(ckpt.parent, max_steps=3), resume=True, progress=False)
    assert sorted(p.name for p in ckpt.parent.iterdir()) == ["run", "run.step-0000002", "run.tmp-killed"]
    assert (ckpt.parent / "run.tmp-killed" / "model.safetensors").read_bytes() == b"partial"


def test_python_resume_after_a_save_killed_between_its_renames_names_the_old_folder(ckpt):
    """Was: train(resume=True) advised to "drop resume" where the CLI named the .old folder."""
    (ckpt.parent / "run.old-x").mkdir()
    ckpt.rename(ckpt.parent / "run.old-x" / "ckpt")
    with pytest.raises(FileNotFoundError, match=r"a save was interrupted: the previous checkpoint is .*run.old-x/ckpt"):
        train(cfg(ckpt.parent, max_steps=3), resume=True, progress=False)
    (ckpt.parent / "run.old-x" / "ckpt").rename(ckpt)
    train(cfg(ckpt.parent, max_steps=3), resume=True, progress=False)  # moved back: it resumes
    assert json.loads((ckpt / "state.json").read_text())["step"] == 3


@pytest.mark.parametrize("keep", [0.05, 1 / 3, 0.5, 0.9, 0.999])
def test_a_cut_optimizer_file_of_any_size_is_named(tmp_path, keep):
    """torch.load of a small cut zip raises a bare OSError (EINVAL from its seek); it is a damaged file all the same."""
    import torch

    from tokembed.model.checkpoint import read_checkpoint_file

    model = torch.nn.Linear(16, 257)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 16)).sum().backward()
    opt.step()
    torch.save(opt.state_dict(), tmp_path / "optimizer.pt")
    data = (tmp_path / "optimizer.pt").read_bytes()
    (tmp_path / "optimizer.pt").write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(ValueError, match=r"checkpoint file .*optimizer\.pt is damaged \(.*\); restore the checkpoint"):
        read_checkpoint_file(tmp_path, "optimizer.pt", lambda p: torch.load(p, weights_only=True, map_location="cpu"))
