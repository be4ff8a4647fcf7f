"""Unclear messages of issue 24 item 22 (its checkpoint, eval, export and demo parts).

Was: a checkpoint folder whose name is not UTF-8 was called "damaged"; ``eval --max-windows 0`` blamed the data
("the validation text has 515 tokens, fewer than one window..."); ``export run -`` wrote a file named ``-``; ``demo``
had no ``--pattern`` for a .tiktoken file.
"""

from __future__ import annotations

import gzip
import json
import os

import pytest

from conftest import STORY
from tokembed.cli import main

SMALL = ["--max-length", "16", "--batch-size", "4", "--dim", "16", "--layers", "1", "--heads", "2", "--quiet"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("msgs")
    assert main(["train", str(STORY), "--out", str(root / "run"), "--steps", "1", *SMALL]) == 0
    return root / "run"


@pytest.mark.skipif(os.uname().sysname == "Darwin", reason="macOS file systems store names as UTF-8 only")
def test_a_checkpoint_folder_whose_name_is_not_utf8_is_a_checkpoint(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    name = os.fsdecode(b"run-\xff")  # a Latin-1 name, as an old tool or another machine made it
    args = ["train", str(STORY), "--out", name, "--steps", "2", "--checkpoint-interval", "1", *SMALL]
    args += ["--tokenizer", "bytes"]  # the name is what is tested: a 257-row table reports and exports 200x faster
    assert main(args) == 0
    for command in (
        ["eval", name, "--lengths", "16", "--max-windows", "2"],
        ["inspect", name, "info"],
        ["report", name, "-o", "r.html", "--no-tsne", "--points", "50"],
        ["export", name, "t.npy"],
        ["train", str(STORY), "--out", name, "--steps", "3", "--resume", "--quiet"],
    ):
        assert main(command) == 0, (command, capsys.readouterr().err)
    assert "damaged" not in capsys.readouterr().err
    assert "run-\\xff" in (tmp_path / "r.html").read_text(encoding="utf-8")  # shown escaped, not dropped
    names = [b"r.html", b"run-\xff", b"run-\xff.step-0000001", b"run-\xff.step-0000002", b"t.npy"]
    assert sorted(os.listdir(b".")) == names


@pytest.mark.parametrize("option", ["--max-windows", "--max-tokens"])
def test_eval_asking_for_nothing_names_the_option(run, option, capsys):
    assert main(["eval", str(run), "--lengths", "16", option, "0"]) == 2
    err = capsys.readouterr().err
    name = option[2:].replace("-", "_")
    assert f"{name} ({option}) must be >= 1, got 0; leave it out to score every window" in err
    assert "validation" not in err


@pytest.mark.parametrize(
    "args",
    [["{run}", "-"], ["{run}", "-", "--format", "npy"], ["{shards}", "--format", "nanogpt", "-"]],
    ids=["projector", "npy", "nanogpt"],
)
def test_export_to_dash_is_refused(run, tmp_path, monkeypatch, capsys, args):
    shards = tmp_path / "shards"
    assert main(["prepare", str(STORY), "--out", str(shards), "-q", "--workers", "1"]) == 0
    monkeypatch.chdir(tmp_path)
    assert main(["export", *[a.format(run=run, shards=shards) for a in args]]) == 2
    assert "- (standard output) is not supported: this command writes files" in capsys.readouterr().err
    assert not os.path.lexists(tmp_path / "-")


def test_demo_takes_a_tiktoken_file_with_its_pattern(tmp_path, capsys):
    from tokembed.tokenizer import openai

    path = tmp_path / "mine.tiktoken"  # cl100k's ranks in a .tiktoken file: the pattern is not in the file
    path.write_bytes(gzip.decompress(openai.encoding_file("cl100k_base").read_bytes()))
    assert main(["demo", "--tokenizer", str(path), "--json"]) == 2
    assert "pass --pattern" in capsys.readouterr().err
    assert main(["demo", "--tokenizer", str(path), "--pattern", "cl100k_base", "--json"]) == 0
    ours = json.loads(capsys.readouterr().out)
    assert main(["demo", "--tokenizer", "cl100k_base", "--json"]) == 0
    chapter = json.loads(capsys.readouterr().out)
    assert ours["first_batch"] == chapter["first_batch"]  # the ids of cl100k_base itself: the pattern was used
