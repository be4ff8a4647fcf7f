"""`tokembed demo`: the chapter's facts, printed for people and as JSON."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from test_embeddings import CHAPTER_TABLE
from tokembed.cli import main


def test_demo_json_on_the_story_prints_the_chapters_numbers(story, capsys):
    from conftest import STORY

    assert main(["demo", "--text", str(STORY), "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert facts["tokenizer"]["n_vocab"] == 50257 and facts["tokenizer"]["endoftext"]["id"] == 50256
    assert facts["text"]["tokens"] == 5145 and facts["text"]["characters"] == len(story)
    assert facts["first_batch"]["inputs"][:2] == [[40, 367, 2885, 1464], [1807, 3619, 402, 271]]
    assert facts["first_batch"]["targets"][0] == [367, 2885, 1464, 1807]
    assert facts["seed_table"]["weight"] == CHAPTER_TABLE
    assert facts["seed_table"]["token_3"] == [-0.4015, 0.9666, -1.1481]
    assert facts["shapes"] == {
        "token_embeddings": [8, 4, 256],
        "positional_embeddings": [4, 256],
        "input_embeddings": [8, 4, 256],
    }
    assert facts["worked_example"]["combined"] == [0.6, 0.1, 0.0]


@pytest.mark.slow
def test_demo_default_corpus_needs_no_download():
    # Run as a user would, in a fresh interpreter, on Python's own documentation topics.
    out = subprocess.run([sys.executable, "-m", "tokembed", "demo"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "pydoc_data.topics" in out.stdout
    assert "50,257 ids, <|endoftext|> = 50256" in out.stdout
    assert "(8, 4, 256)" in out.stdout
    assert "lookup of token 3 -> [ -0.4015,   0.9666,  -1.1481]" in out.stdout
    assert "[0.6000, 0.1000, 0.0000]" in out.stdout


def test_demo_missing_file(tmp_path, capsys):
    assert main(["demo", "--text", str(tmp_path / "nope.txt")]) == 2
    assert f"tokembed demo: error: --text {tmp_path / 'nope.txt'}: no such file" in capsys.readouterr().err


def test_demo_short_text(tmp_path, capsys):
    (tmp_path / "short.txt").write_text("Hello, world")
    assert main(["demo", "--text", str(tmp_path / "short.txt")]) == 2
    assert "the text has 3 tokens, but one window of max_length=4 needs at least 5" in capsys.readouterr().err


def test_demo_folder_instead_of_file(tmp_path, capsys):
    assert main(["demo", "--text", str(tmp_path)]) == 2
    assert "is a folder; give one text file" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--batch-size", "--max-length", "--stride"])
def test_demo_bad_sizes(flag, capsys):
    assert main(["demo", flag, "0"]) == 2
    name = flag.lstrip("-").replace("-", "_")
    assert f"{name} must be >= 1, got 0" in capsys.readouterr().err
