"""What every tokenizer offers, and the identity the manifest records.

A tokenizer is anything with tiktoken's small core (a ``tiktoken.Encoding`` is one): ``name``,
``n_vocab``, ``eot_token``, ``encode_ordinary``, ``encode``, ``decode``, ``decode_bytes`` and
``decode_single_token_bytes``. Its `TokenizerIdentity` travels with the data: two tokenizers with the
same hash give the same ids for every text.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = ["ENDOFTEXT", "Tokenizer", "TokenizerIdentity", "encode_with_specials", "special_tokens", "vocabulary_hash"]

ENDOFTEXT = "<|endoftext|>"


@runtime_checkable
class Tokenizer(Protocol):
    """The interface every stage uses; ``tiktoken.Encoding`` satisfies it as it is.

    Attributes:
        name: what the tokenizer calls itself (``"gpt2"``, ``"cl100k_base"``, ``"bytes"``, ...).
        n_vocab: ids are ``0 .. n_vocab - 1``.
        eot_token: the id that ends a document (``<|endoftext|>`` or the tokenizer's own).
    """

    name: str
    n_vocab: int
    eot_token: int

    def encode_ordinary(self, text: str) -> list[int]:
        """Ids of ``text``, special tokens in it treated as plain text."""
        ...

    def encode(self, text: str, *, allowed_special: Any = ..., disallowed_special: Any = ...) -> list[int]:
        """tiktoken's ``encode``: specials in ``allowed_special`` become their ids."""
        ...

    def decode(self, tokens: Sequence[int], errors: str = "replace") -> str:
        """The text of ``tokens`` (invalid UTF-8 handled by ``errors``)."""
        ...

    def decode_bytes(self, tokens: Sequence[int]) -> bytes:
        """The bytes of ``tokens``."""
        ...

    def decode_single_token_bytes(self, token: int) -> bytes:
        """The bytes of one id (for labels)."""
        ...


def special_tokens(tok: Any) -> dict[str, int]:
    """A tokenizer's special tokens and their ids (tiktoken keeps them in ``_special_tokens``)."""
    found = getattr(tok, "special_tokens", None)
    return dict(found) if found is not None else dict(tok._special_tokens)


def vocabulary_hash(
    name: str, pattern: str, ranks: Iterable[tuple[bytes, int]], specials: Iterable[tuple[str, int]]
) -> str:
    """A sha256 over a vocabulary: its name, split pattern, token bytes by rank and special tokens.

    Equal hashes, equal ids. For a ``tiktoken.Encoding`` this is `tokenizer_hash` (manifests of earlier
    versions carry it, so the byte layout never changes).
    """
    h = hashlib.sha256()
    h.update(name.encode() + b"\0" + pattern.encode() + b"\0")
    for token, rank in sorted(ranks, key=lambda kv: kv[1]):
        h.update(rank.to_bytes(4, "little") + len(token).to_bytes(2, "little") + token)
    for token, rank in sorted(specials, key=lambda kv: kv[1]):
        h.update(rank.to_bytes(4, "little") + token.encode())
    return h.hexdigest()


@dataclasses.dataclass(frozen=True)
class TokenizerIdentity:
    """Who made a folder's ids: recorded in the manifest, compared on every open.

    Attributes:
        name: the tokenizer's name.
        n_vocab: vocabulary size (the model's embedding rows).
        eot_token: the id that ends each document.
        hash: `vocabulary_hash` of the vocabulary; equal hashes, equal ids.
        source: what ``get_tokenizer`` rebuilds it from: a name, or an absolute file path.
        files: ``(file name, sha256)`` of the files it was built from.
        options: the keyword arguments ``get_tokenizer`` needs besides ``source`` (``pattern``, ``eot``).
    """

    name: str
    n_vocab: int
    eot_token: int
    hash: str
    source: str
    files: tuple[tuple[str, str], ...] = ()
    options: tuple[tuple[str, str], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The manifest's ``"tokenizer"`` entry."""
        out: dict[str, Any] = {
            "name": self.name,
            "n_vocab": self.n_vocab,
            "eot_token": self.eot_token,
            "hash": self.hash,
        }
        out["source"] = self.source
        out["files"] = dict(self.files)
        if self.options:
            out["options"] = dict(self.options)
        return out

    @classmethod
    def from_dict(cls, entry: Mapping[str, Any], *, defaults: Mapping[str, Any]) -> TokenizerIdentity:
        """Read a manifest's ``"tokenizer"`` entry; fields it lacks (older manifests) come from ``defaults``."""
        get = lambda key: entry.get(key, defaults.get(key))  # noqa: E731
        return cls(
            name=str(get("name")),
            n_vocab=int(get("n_vocab")),
            eot_token=int(get("eot_token")),
            hash=str(get("hash") or ""),
            source=str(entry.get("source") or get("name")),
            files=tuple(sorted(dict(entry.get("files") or {}).items())),
            options=tuple(sorted(dict(entry.get("options") or {}).items())),
        )

    def describe(self) -> str:
        """One line for messages: ``"gpt2 (50,257 ids, end-of-text 50256, hash 1a2b3c4d)"``."""
        where = "" if self.source == self.name else f" from {self.source}"
        return f"{self.name}{where} ({self.n_vocab:,} ids, end-of-text {self.eot_token}, hash {self.hash[:8]})"

    def same_ids(self, other: TokenizerIdentity) -> bool:
        """True when both give the same ids for every text (by name where a record has no hash)."""
        if (self.n_vocab, self.eot_token) != (other.n_vocab, other.eot_token):
            return False
        return self.hash == other.hash if self.hash and other.hash else self.name == other.name


def encode_with_specials(
    text: str,
    specials: Mapping[str, int],
    encode_ordinary: Callable[[str], list[int]],
    allowed_special: Literal["all"] | Collection[str],
    disallowed_special: Literal["all"] | Collection[str],
) -> list[int]:
    """tiktoken's ``encode`` over any ``encode_ordinary``: allowed specials become their ids (the text
    between them is encoded on its own), a disallowed one in the text is an error.
    """
    allowed = set(specials) if allowed_special == "all" else set(allowed_special) & set(specials)
    disallowed = set(specials) - allowed if disallowed_special == "all" else set(disallowed_special)
    for token in sorted(disallowed):
        if token in text:
            raise ValueError(
                f"text contains the special token {token!r}; pass allowed_special={{{token!r}}} to encode it as "
                "its id, or disallowed_special=() to encode it as plain text"
            )
    if not allowed:
        return encode_ordinary(text)
    ids: list[int] = []
    start = 0
    for m in re.finditer("|".join(re.escape(t) for t in sorted(allowed, key=len, reverse=True)), text):
        ids += encode_ordinary(text[start : m.start()])
        ids.append(specials[m.group()])
        start = m.end()
    return ids + encode_ordinary(text[start:])
