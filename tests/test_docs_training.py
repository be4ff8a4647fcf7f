"""The Python example of docs/training.md runs as a reader pastes it (beside a copy of the story)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from conftest import STORY

DOC = Path(__file__).resolve().parents[1] / "docs" / "training.md"


def test_the_training_doc_example_runs(tmp_path, monkeypatch, capsys):
    (block,) = re.findall(r"^```python\n(.*?)^```", DOC.read_text(encoding="utf-8"), flags=re.S | re.M)
    shutil.copy(STORY, tmp_path / "the-verdict.txt")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("tokembed.model.checkpoint.write_loss_png", lambda log, path: False)  # speed: no PNG
    exec(compile(block, f"{DOC.name}, example", "exec"), {})
    assert capsys.readouterr().out.splitlines()[-1] == "12 257"
