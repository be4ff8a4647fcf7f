"""The fast exact path for ``prepare``: gigatoken's BPE where it gives tiktoken's ids, tiktoken otherwise.

gigatoken (optional extra ``tokembed[fast]``) encodes GPT-2, r50k_base, cl100k_base and o200k_base about
5-15x faster than tiktoken on one core, with the same ids (benchmarks/bench_tokenize.py measures both;
tests compare them on hypothesis text, the chapter's translations, the story, code and whitespace runs).
Texts it cannot take (lone surrogates) go to tiktoken, which repairs them, and so do texts with characters newer
than this Python's Unicode tables, which the two class differently (`_new_characters`); a vocabulary gigatoken cannot
build (one that is no BPE merge list: `_built`) is tiktoken's throughout. Its piece cache grows with
every new word (gigatoken 0.10), so it is rebuilt after each `RESET_CHARS` characters.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import tempfile
import unicodedata
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from tokembed.tokenizer.base import Tokenizer
from tokembed.tokenizer.openai import dump_ranks
from tokembed.tokenizer.patterns import CL100K_PAT_STR, GPT2_PAT_STR, O200K_PAT_STR

__all__ = ["BACKENDS", "TokenEncoder", "fast_backend_problem", "token_encoder"]

BACKENDS = ("auto", "tiktoken", "gigatoken")
RESET_CHARS = 1 << 30  # rebuild gigatoken's tokenizer (and its cache) after this many characters
# gigatoken's name for each tiktoken split pattern it implements.
_SCHEMES = {GPT2_PAT_STR: "gpt2", CL100K_PAT_STR: "gpt4", O200K_PAT_STR: "o200k"}
# A probe of what could go wrong: scripts, digits, code, whitespace runs, a special token as text.
# Texts where gigatoken 0.10 and tiktoken 0.14 give different ids (characters new in Unicode 17, which gigatoken's
# tables class as letters): the routing must send them to tiktoken (`_new_characters`).
_NEWER_PROBES = ("\U000323b0:A", "\U00010951\u58eb")
_PROBE = "Hello, world! naïve café 東京 🤖👍🏽 1234567 x=[a_b(c)]\n\t  \n\n   <|endoftext|> 'll 'S\r\n" + "=" * 600


def fast_backend_problem(enc: Tokenizer) -> str | None:
    """Why gigatoken cannot encode ``enc`` exactly here, or None when it can.

    It needs a tiktoken-style BPE: the tokenizer's optional ``split_pattern`` (one gigatoken implements)
    and ``mergeable_ranks`` (see `tokembed.tokenizer.Tokenizer`).
    """
    if importlib.util.find_spec("gigatoken") is None:
        return "gigatoken is not installed (pip install 'tokembed[fast]')"
    pattern, ranks = _bpe_tables(enc)
    if pattern not in _SCHEMES or ranks is None:
        return (
            f"gigatoken implements the split patterns of gpt2, r50k_base, cl100k_base and o200k_base, not {enc.name}'s"
        )
    if sorted(ranks.values()) != list(range(len(ranks))):
        return f"gigatoken needs ranks 0..n-1 without gaps; {enc.name}'s have gaps"
    return None


def _bpe_tables(enc: Tokenizer) -> tuple[str | None, dict[bytes, int] | None]:
    """The optional capabilities ``split_pattern`` and ``mergeable_ranks`` (None where absent)."""
    return getattr(enc, "split_pattern", None), getattr(enc, "mergeable_ranks", None)


def _build_gigatoken(enc: Tokenizer) -> Any:
    os.environ.setdefault("RAYON_NUM_THREADS", "1")  # one thread per worker: the workers are the parallelism
    from gigatoken.gigatoken_rs import BPETokenizer

    with tempfile.TemporaryDirectory(prefix="tokembed-") as tmp:  # gigatoken reads ranks from a file only
        path = Path(tmp) / f"{enc.name}.tiktoken"
        pattern, ranks = _bpe_tables(enc)
        path.write_bytes(dump_ranks(ranks or {}))
        return BPETokenizer.from_tiktoken(str(path), _SCHEMES[pattern or ""], None)  # no specials: encode_ordinary


def _built(enc: Tokenizer) -> tuple[Any, str | None]:
    """``(gigatoken's tokenizer, None)``, or ``(None, why not)``: gigatoken derives a merge list from the ranks and
    panics on a token that does not split into two tokens of lower rank, which tiktoken's rank lookups never need
    (a vocabulary with tokens removed, say)."""
    try:
        return _build_gigatoken(enc), None
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:  # a Rust panic: pyo3's PanicException derives from BaseException
        return None, f"gigatoken cannot build {enc.name}'s ranks as a BPE merge list ({str(e).splitlines()[0]})"


@functools.cache
def _unassigned() -> np.ndarray:  # (0x110000,) bool
    """Code points this Python's Unicode tables (`unicodedata`) leave unassigned (category Cn)."""
    category = unicodedata.category
    return np.fromiter((category(chr(cp)) == "Cn" for cp in range(0x110000)), dtype=bool, count=0x110000)


def _new_characters(text: str) -> bool:
    """Whether ``text`` holds a code point that Unicode assigned after this Python's tables: gigatoken's tables
    are newer than tiktoken's and class some of them as letters (U+323B0, CJK Extension J, Unicode 17), so the two
    split such a text differently. Every code point where their ids differ was unassigned in Python 3.11's
    Unicode 14 (a scan of all 1.1 M code points, gpt2/cl100k/o200k: 4,699 of them in 27 ranges, all new in Unicode
    17); such a text goes to tiktoken. gpt2 needs it too: no difference next to Latin letters, but one next to some
    CJK characters, where a gpt2 merge joins the two ('\U00010951\u58eb'; tests/test_tokenizer_fast.py).
    (No ``max(text)`` shortcut: it makes a str per character and cost 5x the look-up itself.) Looked at
    `CHECK_CHARS` characters at a time: the look-up's temporaries (the piece, its code points, numpy's intp copy of
    them and the flags: up to 17 bytes a character) stay near 1 MB however long the text (a JSON line can hold
    100 MB); as fast as one look-up of the whole text."""
    if text.isascii():
        return False
    table = _unassigned()
    for start in range(0, len(text), CHECK_CHARS):
        piece = text[start : start + CHECK_CHARS].encode("utf-32-le", "surrogatepass")
        if np.take(table, np.frombuffer(piece, dtype=np.uint32)).any():  # (take: 30% cheaper than fancy indexing)
            return True
    return False


CHECK_CHARS = 1 << 16  # characters `_new_characters` looks up at a time


class TokenEncoder:
    """``encode_ordinary`` into a uint32 array through the chosen backend; ids are always tiktoken's.

    Args:
        enc: the tokenizer (any `tokembed.tokenizer.Tokenizer`).
        backend: ``"auto"`` (gigatoken when installed and exact for ``enc``, else the tokenizer itself),
            ``"tiktoken"`` (the tokenizer itself: the reference) or ``"gigatoken"`` (an error if it cannot).
    """

    def __init__(self, enc: Tokenizer, *, backend: str = "auto"):
        if backend not in BACKENDS:
            raise ValueError(f"tokenize backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        self.enc = enc
        problem = fast_backend_problem(enc) if backend != "tiktoken" else "asked for tiktoken"
        self._fast = None
        if problem is None:
            self._fast, problem = _built(enc)
        if backend == "gigatoken" and problem:
            raise ValueError(
                f"the gigatoken backend cannot be used: {problem}; pass --tokenize-backend auto or tiktoken"
            )
        self._chars = 0  # characters encoded by this gigatoken tokenizer
        if self._fast is not None and not self._probe_agrees():
            warnings.warn(
                f"gigatoken's ids differ from tiktoken's for {enc.name} on a probe text; using tiktoken", stacklevel=2
            )
            self._fast = None

    def _probe_agrees(self) -> bool:
        """gigatoken's ids of the probe are tiktoken's, and the routed ids (`_one`) of texts whose characters the
        two class differently (Unicode 17's) are too: a Python whose tables know those characters (3.15's will)
        cannot tell them from old ones, so there the fast path is not used."""
        if self._fast is None or self._fast.encode(_PROBE).tolist() != self._reference(_PROBE).tolist():
            return False
        return all(self._one(t).tolist() == self._reference(t).tolist() for t in _NEWER_PROBES)

    @property
    def backend(self) -> str:
        """``"gigatoken"`` or ``"tiktoken"`` (the tokenizer's own encoder)."""
        return "gigatoken" if self._fast is not None else "tiktoken"

    def _reference(self, text: str) -> np.ndarray:
        try:
            return self._tiktoken(text)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as e:  # its regex's limit: a ValueError, or a Rust panic (a BaseException) from encode
            if type(e).__name__ != "PanicException" and not str(e).startswith("Regex error"):
                raise
            raise ValueError(
                f"{self.enc.name}'s tiktoken encoder failed on a text of {len(text):,} characters beginning "
                f"{text[:40]!r} ({str(e).splitlines()[0]}): its split pattern gives up on some pathological texts, "
                "such as a run of a million whitespace characters; remove or cut that run, or encode with gigatoken "
                "(pip install 'tokembed[fast]', --tokenize-backend auto)"
            ) from None

    def _tiktoken(self, text: str) -> np.ndarray:
        enc = self.enc
        if hasattr(enc, "encode_to_numpy"):
            try:  # no special allowed and none disallowed: exactly encode_ordinary, without a Python list
                return enc.encode_to_numpy(text, allowed_special=set(), disallowed_special=())
            except UnicodeEncodeError:
                pass  # lone surrogates: encode_ordinary knows how to repair them
        return np.asarray(enc.encode_ordinary(text), dtype=np.uint32)

    def encode_ordinary(self, text: str) -> np.ndarray:
        """Ids of ``text`` (special tokens in it are plain text), ``(n,)`` uint32."""
        self._count(len(text))
        return self._one(text)

    def _count(self, chars: int) -> None:
        """Count characters about to be encoded; rebuild gigatoken's tokenizer (its cache) past `RESET_CHARS`."""
        if self._fast is None:
            return
        self._chars += chars
        if self._chars > RESET_CHARS:
            self._fast, self._chars = _build_gigatoken(self.enc), chars

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        """Ids of many texts, one ``(n_i,)`` uint32 array each, exactly `encode_ordinary`'s.

        A call per text (each an array, no list). gigatoken's own batch encoder was measured within 5% of this by CPU
        time, but it imports awkward (about 0.35 s and 30-50 MB per worker) and holds each batch's result besides:
        it made a worker's memory grow by half mid-run (benchmarks/bench_prepare.py, 1 GB against 100 MB).
        The texts that are not ASCII are looked at for new characters together, in one `_new_characters` call
        (per text only when that finds one): a call per text cost 2.5x as much on texts of 1,000 characters.
        """
        self._count(sum(map(len, texts)))
        if self._fast is None:
            return [self._reference(t) for t in texts]
        wide = [t for t in texts if not t.isascii()]
        if wide and _new_characters("".join(wide)):
            return [self._one(t) for t in texts]  # (which ones: rare)
        encode = self._fast.encode
        try:
            return [encode(t) for t in texts]  # (no Python call of ours per text)
        except TypeError:  # a lone surrogate somewhere (rare): text by text
            return [self._fast_or_reference(t) for t in texts]

    def _one(self, text: str) -> np.ndarray:
        if self._fast is None or _new_characters(text):
            return self._reference(text)
        return self._fast_or_reference(text)

    def _fast_or_reference(self, text: str) -> np.ndarray:
        """gigatoken's ids of a text without new characters (`_new_characters`), tiktoken's without gigatoken."""
        if self._fast is None:
            return self._reference(text)
        try:
            return self._fast.encode(text)
        except TypeError:  # lone surrogates are not UTF-8: tiktoken repairs them
            return self._reference(text)


def token_encoder(enc: Tokenizer, backend: str = "auto") -> TokenEncoder:
    """This process's `TokenEncoder` for ``enc`` (built once; a forked child builds its own)."""
    return _encoder(enc, backend, os.getpid())  # type: ignore[arg-type]  # tokenizers are hashable by identity


@functools.lru_cache(maxsize=4)
def _encoder(enc: Tokenizer, backend: str, pid: int) -> TokenEncoder:
    del pid  # part of the key only: native state is never shared across fork
    return TokenEncoder(enc, backend=backend)
