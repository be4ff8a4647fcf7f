"""Shared fixtures: the chapter's story and its five translations live in ../shared beside the repo."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings

# Timing is not behaviour: on a shared 2-core machine a normal example can take longer than hypothesis's
# default 200 ms deadline, so no test fails for being slow.
settings.register_profile("tokembed", deadline=None)
settings.load_profile("tokembed")

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
STORY = SHARED / "corpora" / "the-verdict.txt"
SPEC_FILES = sorted((SHARED / "spec").glob("*.txt"))


@pytest.fixture(scope="session")
def story() -> str:
    if not STORY.exists():
        pytest.fail(f"the chapter's story is missing: expected {STORY} (../shared beside the repository)")
    return STORY.read_text(encoding="utf-8")


@pytest.fixture(scope="session")
def spec_texts() -> list[str]:
    if len(SPEC_FILES) != 5:
        pytest.fail(f"expected the chapter in five languages under {SHARED / 'spec'}, found {len(SPEC_FILES)} files")
    return [p.read_text(encoding="utf-8") for p in SPEC_FILES]
