"""Any Hugging Face ``tokenizer.json`` on disk (Llama 3, Qwen, Mistral, a user's own), through the
``tokenizers`` library.

BPE, WordPiece and Unigram models are read; a WordLevel model (no subwords: unknown words are lost) is
refused. Byte-level BPE (GPT-2, Llama 3, Qwen) maps every id to exact bytes; for the others a token's
bytes are its text, with SentencePiece's ``▁`` as a space and ``<0xNN>`` byte-fallback tokens as that byte.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tokembed.tokenizer.base import ENDOFTEXT, TokenizerIdentity, encode_with_specials, repair_surrogates

__all__ = ["EOT_CANDIDATES", "HFTokenizer"]

# End-of-text tokens tried in order when none is asked for: GPT-2/Qwen, Llama 3, Llama 2/Mistral, Gemma.
EOT_CANDIDATES = (ENDOFTEXT, "<|end_of_text|>", "</s>", "<eos>")
_MODELS = ("BPE", "WordPiece", "Unigram")
_BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")


@functools.lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """GPT-2's bytes_to_unicode, inverted: byte-level BPE writes byte b as a printable character."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def _is_byte_level(config: dict[str, Any]) -> bool:
    def has(part: Any) -> bool:
        if not isinstance(part, dict):
            return False
        return part.get("type") == "ByteLevel" or any(
            has(p) for p in part.get("pretokenizers") or part.get("decoders") or []
        )

    return has(config.get("pre_tokenizer")) or has(config.get("decoder"))


class HFTokenizer:
    """A ``tokenizer.json`` behind tiktoken's small interface (see `tokembed.tokenizer.base.Tokenizer`).

    Args:
        path: the ``tokenizer.json`` file.
        eot: the end-of-text token; by default the first of `EOT_CANDIDATES` the tokenizer has.

    Raises:
        ValueError: for a file that is not a tokenizer.json, a model tokembed cannot use (names it),
            or no end-of-text token (lists the special tokens to choose from with ``--eot``).
    """

    def __init__(self, path: Path, *, eot: str | None = None):
        self._load(Path(path), eot)

    def _load(self, path: Path, eot: str | None) -> None:
        self.path = path.resolve()
        raw = self.path.read_bytes()
        config = _read_config(self.path, raw)
        self._sha256 = hashlib.sha256(raw).hexdigest()
        self._tok = _read_tokenizer(self.path, raw)
        vocab = self._tok.get_vocab(with_added_tokens=True)
        self._tok.encode_special_tokens = True  # encode_ordinary: special tokens in a text are plain text
        self._byte_level = _is_byte_level(config)
        self.document_cut = _document_cut(config)
        self._specials = {t["content"]: int(t["id"]) for t in config.get("added_tokens", []) if t.get("special")}
        self.name = self.path.parent.name if self.path.stem == "tokenizer" else self.path.stem
        self.n_vocab = max(vocab.values()) + 1
        self.eot_token = self._find_eot(eot)
        self._eot = eot

    def _find_eot(self, eot: str | None) -> int:
        for token in (eot,) if eot is not None else EOT_CANDIDATES:
            found = self._tok.token_to_id(token)
            if found is not None:
                return found
        asked = (
            f"has no token {eot!r}"
            if eot is not None
            else f"has none of the end-of-text tokens {', '.join(EOT_CANDIDATES)}"
        )
        specials = ", ".join(sorted(self._specials)) or "none"
        raise ValueError(
            f"tokenizer {self.path} {asked}; pass --eot TOKEN (eot= in Python) with one of its special tokens: {specials}"
        )

    def __repr__(self) -> str:
        return f"HFTokenizer({str(self.path)!r}, n_vocab={self.n_vocab}, eot_token={self.eot_token})"

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "eot": self._eot}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._load(state["path"], state["eot"])

    @property
    def special_tokens_set(self) -> set[str]:
        return set(self._specials)

    @property
    def special_tokens(self) -> dict[str, int]:
        """The special (added) tokens and their ids."""
        return dict(self._specials)

    def encode_ordinary(self, text: str) -> list[int]:
        """Ids of ``text`` with no special tokens added or recognized; lone surrogates are U+FFFD (as tiktoken)."""
        try:
            return self._tok.encode(text, add_special_tokens=False).ids
        except TypeError:  # "TextInputSequence must be str": a lone surrogate is not UTF-8
            repaired = repair_surrogates(text)
            if repaired == text:
                raise
            return self._tok.encode(repaired, add_special_tokens=False).ids

    def encode_ordinary_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Ids of each text, encoded in parallel by the tokenizers library (an optional `Tokenizer` capability)."""
        try:
            return [e.ids for e in self._tok.encode_batch(list(texts), add_special_tokens=False)]
        except TypeError:
            return [self.encode_ordinary(t) for t in texts]

    def encode(self, text: str, *, allowed_special: Any = frozenset(), disallowed_special: Any = "all") -> list[int]:
        """tiktoken's ``encode``: allowed special tokens become their ids, disallowed ones are an error."""
        return encode_with_specials(text, self._specials, self.encode_ordinary, allowed_special, disallowed_special)

    def decode_single_token_bytes(self, token: int) -> bytes:
        """The bytes of one id: exact for byte-level BPE; the token's text otherwise."""
        piece = self._tok.id_to_token(int(token))
        if piece is None:
            raise ValueError(
                f"token id {token} is not in the vocabulary of {self.path} (size {self.n_vocab}); was the data made with another tokenizer?"
            )
        if piece in self._specials:
            return piece.encode()
        if self._byte_level:
            table = _byte_decoder()
            return bytes(table[c] for c in piece) if all(c in table for c in piece) else piece.encode()
        m = _BYTE_FALLBACK.fullmatch(piece)
        return bytes([int(m.group(1), 16)]) if m else piece.replace("\u2581", " ").encode()

    def decode_bytes(self, tokens: Sequence[int]) -> bytes:
        """The bytes of ``tokens``, joined."""
        return b"".join(self.decode_single_token_bytes(t) for t in tokens)

    def decode(self, tokens: Sequence[int], errors: str = "replace") -> str:
        """The text of ``tokens``: exact bytes for byte-level BPE, the tokenizer's own decoder otherwise."""
        if self._byte_level:
            return self.decode_bytes(tokens).decode("utf-8", errors)
        return self._tok.decode([int(t) for t in tokens], skip_special_tokens=False)

    def identity(self) -> TokenizerIdentity:
        """Name, size, end-of-text id, the file's sha256 as the hash, and how to rebuild it."""
        options = (("eot", self._eot),) if self._eot is not None else ()
        return TokenizerIdentity(
            name=self.name,
            n_vocab=self.n_vocab,
            eot_token=self.eot_token,
            hash=self._sha256,
            source=str(self.path),
            files=((self.path.name, self._sha256),),
            options=options,
        )


def _read_tokenizer(path: Path, raw: bytes) -> Any:
    """The tokenizers library's Tokenizer of a tokenizer.json, with a message that names the file if it fails."""
    from tokenizers import Tokenizer as _HF

    try:
        tok = _HF.from_str(raw.decode("utf-8"))
    except Exception as e:  # the tokenizers library raises a bare Exception for a file it cannot use
        raise ValueError(
            f"{path} cannot be read by the tokenizers library ({e}); the file is damaged or was edited by hand: "
            "save the tokenizer again with Tokenizer.save (or give the tokenizer.json a model was saved with)"
        ) from None
    if not tok.get_vocab(with_added_tokens=True):
        raise ValueError(
            f"{path} has an empty vocabulary (no tokens); train the tokenizer (or give the tokenizer.json a model "
            "was saved with) before preparing data with it"
        )
    return tok


def _document_cut(config: dict[str, Any]) -> str | None:
    """GPT-2's own layout (ByteLevel with its regex, nothing before it) cuts like gpt2; others stay whole."""
    pre = config.get("pre_tokenizer") or {}
    gpt2_like = pre.get("type") == "ByteLevel" and pre.get("use_regex", True) and not config.get("normalizer")
    return "whitespace" if gpt2_like else None


def _read_config(path: Path, raw: bytes) -> dict[str, Any]:
    try:
        config = json.loads(raw)
        model = config["model"]
    except (ValueError, KeyError, TypeError):
        raise ValueError(
            f"{path} is not a Hugging Face tokenizer.json (no 'model' entry); give the tokenizer.json a model was saved with"
        ) from None
    if not isinstance(model, dict):
        raise ValueError(
            f"{path}: its 'model' is {model!r}, not an object with the model's type, vocab and merges; the file is "
            "damaged or hand-made: save the tokenizer with Tokenizer.save (or give the tokenizer.json a model was saved with)"
        )
    kind = model.get("type") or (
        "BPE" if "merges" in model else "WordPiece" if "continuing_subword_prefix" in model else None
    )
    if kind not in _MODELS:
        raise ValueError(
            f"{path} holds a {kind or 'unrecognized'} model; tokembed reads BPE, WordPiece or Unigram tokenizer.json files "
            "(WordLevel loses every word it does not know); use a subword tokenizer"
        )
    return config
