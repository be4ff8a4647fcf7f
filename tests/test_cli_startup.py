"""`tokembed` commands that need no torch do not import it (~2 s of every call otherwise).

Each command runs in a fresh interpreter (this venv's python), which reports the modules it imported;
the parent checks the list. Commands that need torch (train, inspect, demo, ...) are tested elsewhere.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from conftest import imported_modules
from tokembed import prepare_corpus
from tokembed.cli import main

TEXT = " ".join(f"The quick brown fox jumps over the lazy dog, {i} times." for i in range(60))  # one document

# The command line runs in a fresh interpreter: `main`'s status (or argparse's SystemExit) is the exit status.
RUN_MAIN = "import sys; from tokembed.cli import main; sys.exit(main(sys.argv[1:]))"


@pytest.fixture(scope="module")
def text_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("text") / "story.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def shards(tmp_path_factory, text_file) -> Path:
    out = tmp_path_factory.mktemp("shards") / "corpus"
    prepare_corpus([text_file], out, workers=1, progress=False)
    return out


@pytest.mark.parametrize(
    "argv, out",
    [
        (["--version"], "tokembed 0.1.0"),
        (["--help"], "usage: tokembed"),
        (["prepare", "--help"], "usage: tokembed prepare"),
    ],
    ids=["version", "help", "prepare-help"],
)
def test_version_and_help_import_no_torch(tmp_path, argv, out):
    proc, modules = imported_modules(tmp_path, RUN_MAIN, *argv)
    assert proc.returncode == 0, proc.stderr
    assert out in proc.stdout
    assert "torch" not in modules


def test_check_imports_no_torch(tmp_path, shards):
    proc, modules = imported_modules(tmp_path, RUN_MAIN, "check", str(shards))
    assert proc.returncode == 0, proc.stderr
    assert re.fullmatch(
        rf"{re.escape(str(shards))}: OK \(train: 1 shards, [\d,]+ tokens, val: 0 shards, 0 tokens\)\n", proc.stdout
    )
    assert "torch" not in modules


def test_check_json_says_what_the_text_says_with_the_same_exit_status(tmp_path, shards, capsys):
    proc, modules = imported_modules(tmp_path, RUN_MAIN, "check", str(shards), "--json")
    assert proc.returncode == 0 and "torch" not in modules, proc.stderr
    report = json.loads(proc.stdout)
    tokens = int(
        re.search(r"train: 1 shards, ([\d,]+) tokens", main_output(["check", str(shards)], capsys))
        .group(1)
        .replace(",", "")
    )
    assert report == {
        "folder": str(shards),
        "ok": True,
        "problems": [],
        "splits": {
            "train": {"documents": 1, "tokens": tokens, "shards": 1},
            "val": {"documents": 0, "tokens": 0, "shards": 0},
        },
        "sealed": True,
    }
    damaged = tmp_path / "damaged"
    shutil.copytree(shards, damaged)
    shard = damaged / "train" / "00000.bin"
    data = bytearray(shard.read_bytes())
    data[3] ^= 1
    shard.write_bytes(bytes(data))
    assert main(["check", str(damaged)]) == 1
    lines = [line.removeprefix("DAMAGED: ") for line in capsys.readouterr().out.splitlines()]
    assert main(["check", str(damaged), "--json"]) == 1  # the same exit status: 1 when damaged
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and report["problems"] == lines and report["splits"] == {} and report["sealed"] is None
    assert any("train/00000.bin" in p for p in lines)


def main_output(argv: list[str], capsys) -> str:
    assert main(argv) == 0
    return capsys.readouterr().out


def test_stats_imports_no_torch(tmp_path, shards):
    proc, modules = imported_modules(tmp_path, RUN_MAIN, "stats", str(shards), "--max-length", "8", "--world-size", "2")
    assert proc.returncode == 0, proc.stderr
    assert "torch" not in modules


def test_prepare_on_two_ranks_and_merge_import_no_torch(tmp_path, text_file):
    out = tmp_path / "corpus"
    for rank in ("0", "1"):
        proc, modules = imported_modules(
            tmp_path,
            RUN_MAIN,
            "prepare",
            str(text_file),
            "--out",
            str(out),
            "--rank",
            rank,
            "--world-size",
            "2",
            "--workers",
            "1",
            "-q",
        )
        assert proc.returncode == 0, proc.stderr
        assert "torch" not in modules
    proc, modules = imported_modules(tmp_path, RUN_MAIN, "merge", str(out))
    assert proc.returncode == 0, proc.stderr
    assert re.fullmatch(
        rf"{re.escape(str(out))}: merged \(train: 1 documents, [\d,]+ tokens, val: 0 documents, 0 tokens\)\n",
        proc.stderr,
    )
    assert "torch" not in modules


# User errors still come out as one line on stderr: the library's message, prefixed with the command.


@pytest.mark.parametrize(
    "command, message",
    [
        ("stats", "shard folder {missing} does not exist; create it with `tokembed prepare .*`"),
        ("merge", "{missing} holds no rank manifests .*"),
    ],
)
def test_a_missing_folder_is_one_line_and_exit_2(tmp_path, command, message):
    missing = tmp_path / "nonexistent"
    proc, modules = imported_modules(tmp_path, RUN_MAIN, command, str(missing))
    assert proc.returncode == 2
    assert re.fullmatch(
        f"tokembed {command}: error: " + message.format(missing=re.escape(str(missing))) + "\n", proc.stderr
    )
    assert proc.stdout == ""
    assert "torch" not in modules


def test_check_of_a_missing_folder_reports_it_as_the_problem(tmp_path):
    # `check` lists problems on stdout and exits 1 ("exit 1 when damaged"); a missing folder is one problem.
    missing = tmp_path / "nonexistent"
    proc, modules = imported_modules(tmp_path, RUN_MAIN, "check", str(missing))
    assert proc.returncode == 1
    assert re.fullmatch(
        rf"DAMAGED: shard folder {re.escape(str(missing))} does not exist; create it with `tokembed prepare .*`\n",
        proc.stdout,
    )
    assert proc.stderr == f"{missing}: 1 problem(s)\n"
    assert "torch" not in modules


# The positional scheme names come from the registry when argparse needs them: one source, same help.


def test_scheme_names_in_help_and_errors_are_the_registrys(capsys):
    from tokembed.embeddings.registry import POSITIONAL_NAMES

    with pytest.raises(SystemExit):
        main(["experiment", "positions", "--help"])
    assert f"(default all: {','.join(POSITIONAL_NAMES)})" in " ".join(capsys.readouterr().out.split())
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    assert f"positional scheme: {', '.join(POSITIONAL_NAMES)} (default learned)" in " ".join(
        capsys.readouterr().out.split()
    )
    with pytest.raises(SystemExit):
        main(["train", "data.txt", "--out", "x", "--positional", "xpos"])
    assert (
        "invalid choice: 'xpos' (choose from " + ", ".join(map(repr, POSITIONAL_NAMES)) + ")" in capsys.readouterr().err
    )


def test_stats_of_a_mixture_and_export_import_no_torch(tmp_path, shards):
    shutil.copytree(shards, tmp_path / "copy")
    source = ["--source", f"{shards}:0.7", "--source", f"{tmp_path / 'copy'}:0.3"]
    proc, modules = imported_modules(tmp_path, RUN_MAIN, "stats", *source, "--max-length", "8", "--steps", "5")
    assert proc.returncode == 0, proc.stderr
    assert "torch" not in modules
    proc, modules = imported_modules(
        tmp_path, RUN_MAIN, "export", str(shards), "--format", "megatron", str(tmp_path / "m")
    )
    assert proc.returncode == 0, proc.stderr
    assert "torch" not in modules and (tmp_path / "m.idx").is_file()
