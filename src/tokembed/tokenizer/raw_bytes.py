"""``bytes``: one id per byte (0..255 are the byte values) and 256 = ``<|endoftext|>``; 257 ids.

For tiny experiments and tests: no vocabulary file, every byte string round-trips, and a model over it
has an embedding of 257 rows.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence
from typing import Literal

from tokembed.tokenizer.base import (
    ENDOFTEXT,
    TokenizerIdentity,
    encode_with_specials,
    repair_surrogates,
    vocabulary_hash,
)

__all__ = ["ByteTokenizer"]


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates become U+FFFD, as tiktoken does
        return repair_surrogates(text).encode("utf-8")


class ByteTokenizer:
    """The UTF-8 bytes of a text are its ids; ``<|endoftext|>`` is 256.

    Example:
        >>> tok = ByteTokenizer()
        >>> tok.encode_ordinary("hé")
        [104, 195, 169]
        >>> tok.decode([104, 195, 169, 256])
        'hé<|endoftext|>'
    """

    name = "bytes"
    n_vocab = 257
    eot_token = 256
    special_tokens_set = frozenset({ENDOFTEXT})
    document_cut = "whitespace"  # one id per byte: any cut keeps the ids

    def __repr__(self) -> str:
        return "ByteTokenizer()"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ByteTokenizer)

    def __hash__(self) -> int:
        return hash(ByteTokenizer)

    @property
    def special_tokens(self) -> dict[str, int]:
        """``{"<|endoftext|>": 256}``."""
        return {ENDOFTEXT: self.eot_token}

    def encode_bytes(self, data: bytes) -> list[int]:
        """Ids of raw bytes: each byte is its own id."""
        return list(data)

    def encode_ordinary(self, text: str) -> list[int]:
        """Ids of ``text``'s UTF-8 bytes; ``<|endoftext|>`` inside it is plain text."""
        return list(_utf8(text))

    def encode(
        self,
        text: str,
        *,
        allowed_special: Literal["all"] | Collection[str] = frozenset(),
        disallowed_special: Literal["all"] | Collection[str] = "all",
    ) -> list[int]:
        """tiktoken's ``encode``: an allowed ``<|endoftext|>`` becomes 256; a disallowed one is an error."""
        return encode_with_specials(
            text, {ENDOFTEXT: self.eot_token}, self.encode_ordinary, allowed_special, disallowed_special
        )

    def decode_single_token_bytes(self, token: int) -> bytes:
        """``bytes([token])`` for 0..255, ``b"<|endoftext|>"`` for 256."""
        if isinstance(token, bool) or not 0 <= int(token) < self.n_vocab:
            raise ValueError(
                f"token id {token!r} is outside the bytes vocabulary (ids 0..256); was the data made with another tokenizer?"
            )
        return ENDOFTEXT.encode() if token == self.eot_token else bytes([int(token)])

    def decode_bytes(self, tokens: Sequence[int]) -> bytes:
        """The bytes of ``tokens`` (256 becomes ``b"<|endoftext|>"``)."""
        out = bytearray()
        for t in tokens:
            out += self.decode_single_token_bytes(t) if t == self.eot_token or not 0 <= t < 256 else bytes((t,))
        return bytes(out)

    def decode(self, tokens: Sequence[int], errors: str = "replace") -> str:
        """The text of ``tokens``; bytes that are not UTF-8 follow ``errors``."""
        return self.decode_bytes(tokens).decode("utf-8", errors)

    def identity(self) -> TokenizerIdentity:
        """Name, size, end-of-text id and hash for the manifest (no files: nothing to check)."""
        return _identity()


@functools.lru_cache(maxsize=1)
def _identity() -> TokenizerIdentity:
    ranks = ((bytes([b]), b) for b in range(256))
    h = vocabulary_hash("bytes", "", ranks, [(ENDOFTEXT, 256)])
    return TokenizerIdentity(name="bytes", n_vocab=257, eot_token=256, hash=h, source="bytes")
