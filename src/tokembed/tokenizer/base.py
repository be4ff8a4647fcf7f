"""What every tokenizer offers (`Tokenizer`, the whole contract), and the identity the manifest records.

Every stage reads a tokenizer only through the members `Tokenizer` lists; optional capabilities are asked
for (``getattr``) with a default, never assumed. A tokenizer's `TokenizerIdentity` travels with the data:
two tokenizers with the same hash give the same ids for every text.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

import tiktoken

__all__ = [
    "ENDOFTEXT",
    "OPTIONAL_MEMBERS",
    "REQUIRED_MEMBERS",
    "Tokenizer",
    "TokenizerIdentity",
    "TokenizerLike",
    "TokenizerMismatch",
    "encode_ordinary_batch",
    "encode_with_specials",
    "missing_members",
    "repair_surrogates",
    "vocabulary_hash",
]

ENDOFTEXT = "<|endoftext|>"


@runtime_checkable
class Tokenizer(Protocol):
    """Everything tokembed asks of a tokenizer; implement these and register it (`tokembed.register_tokenizer`).

    tiktoken's small core (``encode_ordinary``, ``encode``, the ``decode`` family, ``name``, ``n_vocab``,
    ``eot_token``) plus two members every stage needs: ``special_tokens`` and ``identity()``. Named tiktoken
    encodings are `tokembed.tokenizer.tiktoken_adapter.TiktokenTokenizer` s (``tiktoken.Encoding`` s that add
    these two); ``bytes`` and tokenizer.json files have their own classes. Ids are ``0 .. n_vocab - 1``.

    Attributes:
        name: what the tokenizer calls itself (``"gpt2"``, ``"cl100k_base"``, ``"bytes"``, ...).
        n_vocab: the number of ids; a model over it has this many embedding rows.
        eot_token: the id that ends a document (``<|endoftext|>`` or the tokenizer's own); it must be one of
            ``special_tokens``' ids.
        special_tokens: ``{token text: id}`` of the special tokens (at least the end-of-text one). Inspection
            looks words up in it; text that contains one is encoded as its id only when allowed.

    Optional capabilities (asked for, each with the default used when it is absent):
        document_cut: ``"whitespace"``, ``"space"`` or None: where ``prepare`` may cut a large document without
            changing its ids (`tokembed.tokenizer.cuts`). Default None: documents stay whole (always correct).
        encode_ordinary_batch(texts) -> list[list[int]]: many texts at once (`encode_ordinary_batch`).
            Default: ``encode_ordinary`` on each text.
        encode_to_numpy(text, *, allowed_special, disallowed_special) -> (n,) uint32 array: ids without a
            Python list (windows over a text, prepare). Default: ``encode`` / ``encode_ordinary`` as a list.
        encode_single_token(token_bytes) -> int: the id of one token's bytes (inspection's under-trained
            indicators). Default: a scan of ``decode_single_token_bytes`` over the ids.
        split_pattern and mergeable_ranks: a tiktoken-style byte-level BPE (regex, ``{bytes: rank}``): lets
            the fast backend (gigatoken) encode it, when it implements the pattern. Default: its own encoder.
    """

    @property
    def name(self) -> str:
        """What the tokenizer calls itself."""
        ...

    @property
    def n_vocab(self) -> int:
        """The number of ids."""
        ...

    @property
    def eot_token(self) -> int:
        """The id that ends a document."""
        ...

    @property
    def special_tokens(self) -> Mapping[str, int]:
        """``{token text: id}`` of the special tokens, the end-of-text one among them."""
        ...

    def encode_ordinary(self, text: str) -> list[int]:
        """Ids of ``text``, special tokens in it treated as plain text. Lone surrogates must not raise
        (tiktoken and tokembed's tokenizers encode them as U+FFFD)."""
        ...

    def encode(self, text: str, *, allowed_special: Any = ..., disallowed_special: Any = ...) -> list[int]:
        """tiktoken's ``encode``: specials in ``allowed_special`` (a set, or ``"all"``) become their ids; one in
        ``disallowed_special`` (default ``"all"`` minus the allowed) is a ValueError. `encode_with_specials`
        implements it over ``encode_ordinary``."""
        ...

    def decode(self, tokens: Sequence[int], errors: str = "replace") -> str:
        """The text of ``tokens`` (invalid UTF-8 handled by ``errors``)."""
        ...

    def decode_bytes(self, tokens: Sequence[int]) -> bytes:
        """The bytes of ``tokens``."""
        ...

    def decode_single_token_bytes(self, token: int) -> bytes:
        """The bytes of one id (inspection's labels). An id with no token (unassigned) raises KeyError or
        ValueError."""
        ...

    def identity(self) -> TokenizerIdentity:
        """What the manifest records: name, ``n_vocab``, ``eot_token`` and a ``hash`` such that equal hashes
        mean equal ids for every text (`vocabulary_hash` over what decides the ids). ``source`` (what
        ``get_tokenizer`` rebuilds it from) defaults to the name; the registry fills it for registered ones."""
        ...


# What a ``tokenizer=`` argument takes: a name or file for `tokembed.get_tokenizer`, or a tokenizer object (a plain
# ``tiktoken.Encoding`` is adapted to `Tokenizer`).
TokenizerLike: TypeAlias = str | os.PathLike[str] | Tokenizer | tiktoken.Encoding

REQUIRED_MEMBERS = (
    "name",
    "n_vocab",
    "eot_token",
    "special_tokens",
    "encode_ordinary",
    "encode",
    "decode",
    "decode_bytes",
    "decode_single_token_bytes",
    "identity",
)
OPTIONAL_MEMBERS = (
    "document_cut",
    "encode_ordinary_batch",
    "encode_to_numpy",
    "encode_single_token",
    "split_pattern",
    "mergeable_ranks",
)


def missing_members(obj: object) -> list[str]:
    """The `Tokenizer` members ``obj`` lacks (empty for a tokenizer)."""
    return [m for m in REQUIRED_MEMBERS if not hasattr(obj, m)]


def repair_surrogates(text: str) -> str:
    """``text`` with each lone surrogate (not encodable as UTF-8) replaced by U+FFFD, as tiktoken's ``encode`` does."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def encode_ordinary_batch(tok: Tokenizer, texts: Sequence[str]) -> list[list[int]]:
    """The ids of each text (specials as plain text): the tokenizer's own batch encoder when it has one."""
    batch = getattr(tok, "encode_ordinary_batch", None)
    if batch is not None:
        return batch(list(texts))
    return [tok.encode_ordinary(t) for t in texts]


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
    for special, sid in sorted(specials, key=lambda kv: kv[1]):
        h.update(sid.to_bytes(4, "little") + special.encode())
    return h.hexdigest()


@dataclasses.dataclass(frozen=True)
class TokenizerIdentity:
    """Who made a folder's ids: recorded in the manifest, compared on every open.

    Attributes:
        name: the tokenizer's name.
        n_vocab: vocabulary size (the model's embedding rows).
        eot_token: the id that ends each document.
        hash: `vocabulary_hash` of the vocabulary (or any sha256 over what decides the ids); equal hashes,
            equal ids. Empty only in records of old versions (then names are compared).
        source: what ``get_tokenizer`` rebuilds it from: a registered name, or an absolute file path
            (default: ``name``).
        files: ``(file name, sha256)`` of the files it was built from (a mapping is accepted).
        options: the keyword arguments ``get_tokenizer`` needs besides ``source`` (``pattern``, ``eot``).

    Example:
        >>> TokenizerIdentity(name="chars", n_vocab=30, eot_token=29, hash="ab12" * 16).source
        'chars'
    """

    name: str
    n_vocab: int
    eot_token: int
    hash: str
    source: str = ""
    files: tuple[tuple[str, str], ...] = ()
    options: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"a tokenizer identity needs a non-empty name, got {self.name!r}")
        if isinstance(self.n_vocab, bool) or not isinstance(self.n_vocab, int) or self.n_vocab < 1:
            raise ValueError(f"tokenizer {self.name!r}: n_vocab must be an int >= 1, got {self.n_vocab!r}")
        if (
            isinstance(self.eot_token, bool)
            or not isinstance(self.eot_token, int)
            or not 0 <= self.eot_token < self.n_vocab
        ):
            raise ValueError(
                f"tokenizer {self.name!r}: eot_token must be an id in 0..{self.n_vocab - 1}, got {self.eot_token!r}"
            )
        if not isinstance(self.hash, str):
            raise ValueError(f"tokenizer {self.name!r}: hash must be a str (a sha256 hex digest), got {self.hash!r}")
        object.__setattr__(self, "source", str(self.source or self.name))
        for key in ("files", "options"):
            value = getattr(self, key)
            pairs = value.items() if isinstance(value, Mapping) else value
            object.__setattr__(self, key, tuple(sorted((str(k), str(v)) for k, v in pairs)))

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


class TokenizerMismatch(ValueError):
    """Data made with one tokenizer, opened for another: the message names both and what to do.

    Callers that know the context (a command, a checkpoint) re-raise it with their own advice
    (`with_advice`): a hint that names an option the command does not have is no help.

    Attributes:
        data: the folder (or prefix) holding the data.
        recorded: the tokenizer the data was made with.
        asked: the tokenizer asked for.
    """

    def __init__(self, data: str, recorded: TokenizerIdentity, asked: TokenizerIdentity, advice: str | None = None):
        self.data, self.recorded, self.asked = data, recorded, asked
        advice = advice or (
            f"open it with tokenizer {recorded.source!r} (--tokenizer {recorded.source}), or prepare the corpus again "
            f"with {asked.source}"
        )
        super().__init__(
            f"{data} was prepared with {recorded.describe()}, but {asked.describe()} was asked for; {advice}"
        )

    def with_advice(self, advice: str) -> TokenizerMismatch:
        """The same mismatch, with another way out."""
        return TokenizerMismatch(self.data, self.recorded, self.asked, advice)
