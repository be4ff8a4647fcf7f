"""Every Python example of docs/positions.md runs, in order and in one namespace, as a reader pastes them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tokembed.embeddings.names import SCHEMES

DOC = Path(__file__).resolve().parents[1] / "docs" / "positions.md"


@pytest.mark.slow
def test_the_positions_doc_examples_run(capsys):
    blocks = re.findall(r"^```python\n(.*?)^```", DOC.read_text(encoding="utf-8"), flags=re.S | re.M)
    assert len(blocks) >= 5
    saved = dict(SCHEMES)
    try:
        namespace: dict = {}
        for i, block in enumerate(blocks):
            exec(compile(block, f"{DOC.name}, example {i + 1}", "exec"), namespace)
        assert type(namespace["model"].positional).__name__ == "LearnedSlopes"  # the doc's own scheme, in a GPT
    finally:
        SCHEMES.clear()
        SCHEMES.update(saved)  # the doc registered "slopes": no other test sees it
    out = capsys.readouterr().out
    assert "{'base': 500.0, 'scaling': None, 'factor': 1.0, 'fraction': 0.5}" in out
