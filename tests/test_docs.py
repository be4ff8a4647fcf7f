"""What the docs name exists: every `tokembed.x.y` in backticks, every repository path and link, every CLI option.

A rename that forgets the docs fails here, naming the document, the line and the name. Names must be public:
a doc that sends the reader into a private module (``tokembed._plot``) names something they cannot rely on.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from tokembed.cli import build_parser

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


# ------------------------------------------------------------------------ command lines in the docs

COMMAND = re.compile(r"(?:^|\$ |-m |`)(tokembed (?:[a-z]+)(?: [^`#\n]*)?)")


def _command_lines() -> list[tuple[str, int, str]]:
    """(document, line number, command) for every ``tokembed COMMAND ...`` the docs show, in code or in backticks."""
    found = []
    for doc in DOCS:
        in_code = False
        for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            if line.lstrip().startswith("```"):
                in_code = not in_code
                continue
            text = line.split(" # ")[0] if in_code else line
            found += [(doc.name, n, m.group(1).strip()) for m in COMMAND.finditer(text) if in_code or "`" in m.group(0)]
    return found


def _words(command: str) -> list[str]:
    """The command's words after ``tokembed``: up to a pipe or redirection, brackets of optional parts removed."""
    try:
        words = shlex.split(command.replace("[", " ").replace("]", " ").replace("\\", " "))
    except ValueError:  # an unbalanced quote in prose
        return []
    cut = next((i for i, w in enumerate(words) if w in ("|", "&&", ">", "2>&1")), len(words))
    return words[1:cut]


@functools.cache
def _parser() -> argparse.ArgumentParser:
    return build_parser()  # one for every line: parsing leaves a parser as it was


def _command_parser(words: list[str]) -> argparse.ArgumentParser | None:
    """The (sub)parser ``words`` select: ``inspect SOURCE QUESTION`` skips its SOURCE."""
    parser = _parser()
    rest = list(words)
    while True:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            return parser
        if parser.prog == "tokembed inspect" and rest:
            rest.pop(0)  # SOURCE
        if not rest or rest[0] not in subs[0].choices:
            return None if parser.prog == "tokembed" else parser
        parser = subs[0].choices[rest.pop(0)]


def test_every_command_line_in_the_docs_uses_the_current_options(capsys):
    bad = []
    for doc, line, command in _command_lines():
        words = _words(command)
        parser = _command_parser(words)
        if parser is None:
            continue  # prose such as "tokembed reads a column"
        known = {s for a in parser._actions for s in a.option_strings if s not in getattr(a, "old", ())}
        for w in words:
            flag = w.split("=")[0]
            if re.fullmatch(r"--[a-z][\w-]*|-[a-zA-Z]", flag) and flag not in known:
                bad.append(f"{doc}:{line}: {flag} is not an option of `{parser.prog}` ({command})")
        with contextlib.suppress(SystemExit):  # placeholders (megatron|nanogpt) may not parse: options checked above
            _parser().parse_args(words)
        notes = [n for n in capsys.readouterr().err.splitlines() if "is deprecated" in n]
        bad += [f"{doc}:{line}: {command}: {n}" for n in notes]
    assert not bad, "\n".join(bad)
