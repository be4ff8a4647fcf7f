"""What the docs name exists: every `tokembed.x.y` they show in backticks, every repository path, every link.

A rename that forgets the docs fails here, naming the document, the line and the name. Names must be public:
a doc that sends the reader into a private module (``tokembed._plot``) names something they cannot rely on.
"""

from __future__ import annotations

import importlib
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])

SPAN = re.compile(r"`([^`\n]+)`")
DOTTED = re.compile(r"^tokembed(?:\.\w+)+")  # tokembed.a.b, up to the first "(" or space
# a path in this repository: tokembed/... (= src/tokembed/...), tests/..., benchmarks/..., docs/..., scripts/...
PATH = re.compile(r"(?<![\w/.])((?:src/)?(?:tokembed|tests|benchmarks|docs|scripts)/[\w./-]*[\w/])")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _spans() -> list[tuple[str, int, str]]:
    """(document, line number, text of a backtick span) for every doc, code blocks left out."""
    found = []
    for doc in DOCS:
        in_code = False
        for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            if line.lstrip().startswith("```"):
                in_code = not in_code
                continue
            if not in_code:
                found += [(doc.name, n, s) for s in SPAN.findall(line)]
    return found


def resolve(dotted: str) -> object:
    """The object ``tokembed.a.b.c`` names: the longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)  # AttributeError: the doc names something that is not there
        return obj
    raise ModuleNotFoundError(dotted)


def _entry_point_groups() -> set[str]:
    """Names like ``tokembed.plugins`` that are entry point groups tokembed reads, not modules."""
    source = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "src" / "tokembed").rglob("*.py"))
    return set(re.findall(r"_GROUP\w* = \"(tokembed\.[\w.]+)\"", source))


def test_every_dotted_name_in_the_docs_exists_and_is_public():
    bad = []
    groups = _entry_point_groups()
    assert "tokembed.plugins" in groups  # the check sees the groups it leaves alone
    for doc, line, span in _spans():
        m = DOTTED.match(span)
        if not m or m.group(0) in groups:
            continue
        name = m.group(0)
        if any(part.startswith("_") for part in name.split(".")):
            bad.append(f"{doc}:{line}: {name} is private; name the public place")
            continue
        try:
            resolve(name)
        except (ImportError, AttributeError) as e:
            bad.append(f"{doc}:{line}: {name} does not exist ({e})")
    assert not bad, "\n".join(bad)


def _path_exists(text: str) -> bool:
    path = text.rstrip("/.")
    if any((ROOT / p).exists() for p in (path, f"src/{path}")) or ("*" in path and list(ROOT.glob(path))):
        return True
    # a folder the benchmarks write (benchmarks/data/) is git-ignored: named in the docs, absent from a clone
    return subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", text], check=False).returncode == 0


def test_every_repository_path_and_link_in_the_docs_exists():
    bad = []
    for doc, line, span in _spans():
        bad += [f"{doc}:{line}: {p}" for p in PATH.findall(span) if not _path_exists(p)]
    for doc in DOCS:
        for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            for target in LINK.findall(line):
                if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                    continue  # a web address or an anchor
                if not (doc.parent / target.split("#")[0]).exists():
                    bad.append(f"{doc.name}:{n}: link {target}")
    assert not bad, "paths the docs name that do not exist:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    "name, ok",
    [
        ("tokembed.prepare_corpus", True),
        ("tokembed.shards.zstd.ZstdReader", True),
        ("tokembed.shards.zstd.NoSuchReader", False),
        ("tokembed.no_such_module.thing", False),
    ],
)
def test_resolve_finds_what_exists_and_only_that(name, ok):
    if ok:
        assert resolve(name) is not None
    else:
        with pytest.raises((ImportError, AttributeError)):
            resolve(name)


@pytest.mark.parametrize(
    "path, ok",
    [
        ("tests/conftest.py", True),
        ("tokembed/shards/schema.py", True),  # as the docs write source paths: under src/
        ("benchmarks/data/", True),  # git-ignored: the benchmarks create it
        ("tests/no_such_test.py", False),
        ("tokembed/shards/no_such.py", False),
    ],
)
def test_path_check_finds_what_exists_and_only_that(path, ok):
    assert _path_exists(path) == ok
