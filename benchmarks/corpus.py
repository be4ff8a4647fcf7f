"""Build benchmark corpora from text that is on every machine: no download, nothing committed.

Documents come, in this order, from
1. text under /usr/share/doc (README, changelogs, copyright files, .txt/.md/.rst; gzip'ed ones decompressed),
2. docstrings of the Python standard library's modules, classes and functions (parsed with ``ast``),
3. docstrings of the packages installed next to this Python (numpy, torch, ...).

Files are walked in sorted order and documents shuffled with a fixed seed, so the same machine gives the
same corpus. When the unique text runs out, the documents are emitted again in a new shuffled order (a
repeated document tokenizes to the same ids, which is fine for throughput and memory benchmarks).

    .venv/bin/python benchmarks/corpus.py benchmarks/data/corpus-100mb.jsonl --size-mb 100
    from benchmarks.corpus import build_corpus; build_corpus("benchmarks/data/c.jsonl", 100)

Output, by the file's suffix: ``.jsonl`` (one ``{"text": ..., "source": ...}`` per line) or ``.txt``
(documents separated by blank lines). Sizes are in MB of the output file (10**6 bytes).
"""

from __future__ import annotations

import argparse
import ast
import gzip
import json
import os
import random
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

TEXT_SUFFIXES = {".txt", ".md", ".rst", ".text", ".markdown", ""}
DOC_NAMES = ("readme", "changelog", "copyright", "news", "authors", "todo", "faq", "history", "changes")
MIN_CHARS = 200  # skip tiny fragments (one-line docstrings, empty READMEs)


def _is_text_doc(p: Path) -> bool:
    name = p.name.lower()
    base = name[:-3] if name.endswith(".gz") else name
    suffix = os.path.splitext(base)[1]
    return suffix in TEXT_SUFFIXES and (suffix != "" or base.startswith(DOC_NAMES)) or suffix in (".txt", ".md", ".rst")


def _walk(root: Path) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for f in sorted(filenames):
            yield Path(dirpath) / f


def doc_texts(root: str | os.PathLike = "/usr/share/doc") -> Iterator[tuple[str, str]]:
    """(source, text) for each readable UTF-8 text document under ``root``."""
    for p in _walk(Path(root)):
        if not p.is_file() or p.is_symlink() or not _is_text_doc(p):
            continue
        try:
            raw = gzip.decompress(p.read_bytes()) if p.name.endswith(".gz") else p.read_bytes()
            text = raw.decode("utf-8")
        except (OSError, EOFError, UnicodeDecodeError, gzip.BadGzipFile):
            continue
        if len(text) >= MIN_CHARS and "\0" not in text:
            yield str(p), text


def docstrings(root: str | os.PathLike) -> Iterator[tuple[str, str]]:
    """(source, docstring) for every module/class/function docstring of the .py files under ``root``."""
    for p in _walk(Path(root)):
        if p.suffix != ".py" or "test" in p.name:
            continue
        try:
            tree = ast.parse(p.read_bytes())
        except (SyntaxError, ValueError, OSError, RecursionError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node, clean=True)
                if doc and len(doc) >= MIN_CHARS:
                    yield f"{p}:{getattr(node, 'name', '<module>')}", doc


def _pieces(source: str, text: str, max_chars: int) -> Iterator[tuple[str, str]]:
    """Cut a long text into documents of at most about ``max_chars`` at paragraph boundaries."""
    if len(text) <= max_chars:
        yield source, text
        return
    start, part = 0, 0
    while start < len(text):
        end = text.rfind("\n\n", start, start + max_chars)
        end = len(text) if start + max_chars >= len(text) else (end + 2 if end > start else start + max_chars)
        if end - start >= MIN_CHARS:
            yield f"{source}#{part}", text[start:end]
        start, part = end, part + 1


def _unique(items: Iterator[tuple[str, str]], seen: set[int]) -> Iterator[tuple[str, str]]:
    for source, text in items:
        h = hash(text)
        if h not in seen:
            seen.add(h)
            yield source, text


def sources(*, max_chars: int = 32_000) -> Iterator[tuple[str, str]]:
    """Every offline document once (duplicates dropped, long ones cut at paragraphs), docs and docstrings interleaved."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    purelib = Path(sysconfig.get_paths()["purelib"])

    def code() -> Iterator[tuple[str, str]]:
        yield from docstrings(stdlib)
        if purelib.is_dir() and not purelib.is_relative_to(stdlib):
            yield from docstrings(purelib)

    seen: set[int] = set()
    docs = _unique((p for s, t in doc_texts("/usr/share/doc") for p in _pieces(s, t, max_chars)), seen)
    strings = _unique(code(), seen)
    # Interleave by bytes so any prefix of the corpus mixes prose/changelogs with API documentation.
    streams, sizes = [docs, strings], [0, 0]
    while streams:
        i = min(range(len(streams)), key=sizes.__getitem__)
        item = next(streams[i], None)
        if item is None:
            del streams[i], sizes[i]
            continue
        sizes[i] += len(item[1])
        yield item


def build_corpus(
    out_path: str | os.PathLike, size_mb: float, *, seed: int = 0, max_unique_mb: float | None = None
) -> Path:
    """Write about ``size_mb`` MB of offline text documents to ``out_path`` (``.jsonl`` or ``.txt``).

    Args:
        out_path: the file to write (its folder is created); written to a temporary name then renamed.
        size_mb: target size of the output file in MB (10**6 bytes); the file ends at the first
            document boundary at or past it.
        seed: shuffling seed (the same seed and machine give the same bytes).
        max_unique_mb: stop collecting unique text after this many MB (default: ``size_mb``) and repeat.

    Returns:
        ``out_path`` as a Path.
    """
    out = Path(out_path)
    if size_mb <= 0:
        raise ValueError(f"size_mb must be > 0, got {size_mb}")
    fmt = {".jsonl": "jsonl", ".txt": "txt"}.get(out.suffix)
    if fmt is None:
        raise ValueError(f"{out}: write a .jsonl or .txt file, got suffix {out.suffix!r}")
    target = int(size_mb * 1e6)
    budget = int((max_unique_mb or size_mb) * 1e6)

    def encode(source: str, text: str) -> bytes:
        if fmt == "jsonl":
            return (json.dumps({"text": text, "source": source}, ensure_ascii=False) + "\n").encode()
        return text.encode() + b"\n\n"

    pool: list[bytes] = []
    collected = 0
    for source, text in sources():
        b = encode(source, text)
        pool.append(b)
        collected += len(b)
        if collected >= budget:
            break
    if not pool:
        raise FileNotFoundError("no offline text found under /usr/share/doc or in the Python library")
    rng = random.Random(seed)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    written = 0
    with open(tmp, "wb", buffering=1 << 20) as f:
        while written < target:
            order = list(range(len(pool)))
            rng.shuffle(order)
            for i in order:
                f.write(pool[i])
                written += len(pool[i])
                if written >= target:
                    break
    os.replace(tmp, out)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="output file, .jsonl or .txt")
    ap.add_argument("--size-mb", type=float, default=100.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    p = build_corpus(args.out, args.size_mb, seed=args.seed)
    print(f"wrote {p} ({p.stat().st_size / 1e6:.1f} MB) in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
