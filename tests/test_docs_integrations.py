"""Every code block of docs/integrations.md runs, in order, as a reader pastes them: bash blocks in a
shell (this venv's tokembed and python first on PATH), Python blocks in one namespace, from a folder with
``corpus.jsonl`` (the chapter's story, a document per paragraph) and nanoGPT's code in ``nanoGPT/``."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "integrations.md"


def blocks() -> list[tuple[str, str]]:
    return re.findall(r"^```(python|bash)\n(.*?)^```", DOC.read_text(encoding="utf-8"), flags=re.S | re.M)


def test_the_doc_has_a_tested_section_per_trainer():
    text = DOC.read_text(encoding="utf-8")
    for section in (
        "PyTorch-native",
        "accelerate",
        "torchdata",
        "torchtitan",
        "Hugging Face",
        "litgpt",
        "nanoGPT",
        "Megatron",
    ):
        assert re.search(rf"^## .*{section}", text, flags=re.M), section
    assert len(blocks()) >= 12
    # every fenced block is one the test runs (a ```py or ```sh block would be skipped silently)
    assert len(re.findall(r"^```\S", text, flags=re.M)) == len(blocks())


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore")
def test_every_example_of_the_integrations_doc_runs(tmp_path, story, monkeypatch):
    paragraphs = [p for p in story.split("\n\n") if p.strip()] * 4
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps({"text": p}) + "\n" for p in paragraphs))
    shutil.copytree(ROOT / "tests" / "nanogpt", tmp_path / "nanoGPT")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # the litgpt example sets it
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    namespace: dict = {}
    for i, (kind, code) in enumerate(blocks()):
        if kind == "bash":
            proc = subprocess.run(
                ["bash", "-e", "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
            )
            assert proc.returncode == 0, f"example {i + 1}:\n{code}\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}"
        else:
            exec(compile(code, f"{DOC.name}, example {i + 1}", "exec"), namespace)
    assert (tmp_path / "hf-run" / "checkpoint-2" / "tokembed_loader.json").is_file()
    assert (tmp_path / "hf-run-2" / "checkpoint-6" / "tokembed_loader.json").is_file()  # resumed from hf-run
    assert (tmp_path / "nanoGPT" / "data" / "tokembed" / "meta.pkl").is_file()
    assert namespace["train_ds"][0]["tokens"].shape == (64,)
