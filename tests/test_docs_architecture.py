"""docs/architecture.md is true: each recipe names at most two source files, which exist (or whose folder exists,
for a new module), and the page of data flow runs and prints what its comments say."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
TEXT = DOC.read_text(encoding="utf-8")
SOURCE = re.compile(r"`(src/tokembed/[^`]+)`")


def _recipes() -> dict[str, str]:
    """Title -> text of each ``### Add ...`` section."""
    parts = re.split(r"^### ", TEXT.split("## Recipes", 1)[1].split("\n## ", 1)[0], flags=re.M)[1:]
    return {p.splitlines()[0]: p for p in parts}


def test_the_recipes_cover_what_contributors_add():
    assert {"Add a positional scheme", "Add a tokenizer", "Add an input format", "Add a CLI option"} <= set(_recipes())


@pytest.mark.parametrize("title", sorted(_recipes()))
def test_each_recipe_names_at_most_two_source_files_that_exist(title):
    # every paragraph that says "files:" names the source files of one way to do it
    paragraphs = [p for p in _recipes()[title].split("\n\n") if re.search(r"\bfiles:", p, flags=re.I)]
    assert paragraphs, f"{title}: no 'Files:' line"
    for p in paragraphs:
        files = SOURCE.findall(p.split("\n\n")[0])
        assert 1 <= len(files) <= 2, f"{title}: {files}"
        for f in files:
            path = ROOT / f
            new = "<" in f  # a module the recipe creates: its folder exists
            assert (path.parent if new else path).exists(), f"{title}: {f} does not exist"


@pytest.mark.slow  # prepares a folder and builds a GPT: a few seconds
def test_the_page_of_data_flow_runs_and_prints_what_it_says(tmp_path, monkeypatch, capsys):
    block = TEXT.split("## One page of data flow", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    expected = [
        line.split("# ", 1)[1].split(": ")[0].strip()
        for line in block.splitlines()
        if line.startswith("print(") and "# " in line
    ]
    monkeypatch.chdir(tmp_path)
    exec(compile(block, f"{DOC.name}, data flow", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    assert printed == expected
