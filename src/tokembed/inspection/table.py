"""Questions about an embedding table: neighbours, analogies, similarity, a text's tokens, positions.

Works on any (V, D) table: a ``tokembed train`` checkpoint, an exported ``.npy``/``.safetensors``
table, or GPT-2's own ``wte``/``wpe`` (see ``tokembed.model.gpt2_weights``). numpy and torch only: the
pictures live in ``tokembed.inspection.plot``.

How a query is turned into a vector:

* an ``int`` is a token id: its row.
* a ``str`` is encoded by the table's tokenizer **exactly as written**. GPT-2's BPE has separate
  tokens for a word at the start of a text and for the same word after a space: ``"king"`` is
  id 3364 and ``" king"`` is id 5822, and inside running text almost every word is the second kind.
  ``"<|endoftext|>"`` is the special token.
* a word of several tokens is the **mean of its tokens' vectors** (the raw rows, before any
  normalisation); every one of its tokens is then left out of its neighbours, as gensim leaves
  out the query words.
* a table without a tokenizer but with labels looks words up in its labels, exactly.

Similarity is always cosine similarity.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import numbers
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from tokembed._checks import check_int
from tokembed.embeddings.names import find_scheme, positional_scheme, scheme_names
from tokembed.tokenizer.base import Tokenizer, TokenizerLike
from tokembed.tokenizer.gpt2 import GPT2_EOT, GPT2_N_VOCAB
from tokembed.training.counts import MIN_COUNT, check_min_count

__all__ = [
    "EXPORT_FORMAT",
    "EmbeddingTable",
    "Neighbour",
    "TokenRow",
    "gpt2_byte_spelling",
    "as_table_tensor",
    "resolve_tokenizer",
]


EXPORT_FORMAT = "tokembed-embeddings"  # safetensors metadata "format" of `tokembed export` tables


def _vectors(positional: str) -> str | None:
    """How a scheme's per-position vectors are had ("table", "formula"), or None (none, or an unknown name)."""
    scheme = find_scheme(positional)
    return scheme.vectors if scheme is not None else None


def _formula_positions(positional: str, options, context_length: int, dim: int) -> torch.Tensor:
    """The (context_length, dim) vectors a scheme computes (not stored), by the scheme's own module."""
    from tokembed.embeddings.scheme import ModelShape

    module = positional_scheme(positional).module(options, ModelShape(dim=dim, context_length=context_length))
    with torch.no_grad():
        return module(torch.arange(context_length))  # (C,) -> (C,D)


def _with_vectors() -> str:
    return " or ".join(s.name for s in map(positional_scheme, scheme_names()) if s.vectors)


@dataclass(frozen=True)
class Neighbour:
    """One answer of a similarity query: a token, its label and its cosine similarity.

    ``count`` is how many times the token was read (None when the table has no counts) and
    ``undertrained`` whether that is fewer than the table's ``min_count``: its vector, and so this
    answer, then says little about the token.
    """

    id: int
    token: str
    score: float
    count: int | None = None
    undertrained: bool | None = None


@dataclass(frozen=True)
class TokenRow:
    """One token of a text: where it is, its id, its text, the norm of its embedding, and its count."""

    position: int
    id: int
    token: str
    norm: float
    count: int | None = None
    undertrained: bool | None = None


@functools.lru_cache(maxsize=1)
def _byte_to_unicode() -> dict[int, str]:
    # GPT-2's encoder.json spelling (bytes_to_unicode in OpenAI's encoder.py): printable bytes stand for
    # themselves, the others (space, newline, ...) are shifted to code points 256+, e.g. space -> "Ġ".
    keep = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def gpt2_byte_spelling(token: bytes) -> str:
    """Spell a token's bytes as GPT-2's ``encoder.json`` does: no whitespace, one string per token.

    Example:
        >>> gpt2_byte_spelling(b" king"), gpt2_byte_spelling(b"\\n")
        ('Ġking', 'Ċ')
    """
    m = _byte_to_unicode()
    return "".join(m[b] for b in token)


def _checkpoint_tokenizer(config: dict) -> TokenizerLike:
    """The tokenizer a checkpoint was trained with: rebuilt from its record (checked), or its name."""
    return _recorded_tokenizer(config.get("tokenizer_record") or config.get("tokenizer", "gpt2"))


def _recorded_tokenizer(record: dict | str) -> TokenizerLike:
    if isinstance(record, dict):
        from tokembed.tokenizer import tokenizer_from_record

        return tokenizer_from_record(record)
    return record  # "gpt2": checkpoints from before tokenizers were recorded


def _model_tokenizer(model: Any, rows: int, given: TokenizerLike | None) -> TokenizerLike | None:
    """The tokenizer of an in-memory model's ids: ``given`` (checked against the model's record), the one it
    records (``load_checkpoint`` sets ``model.tokenizer_record``), or GPT-2's when its vocabulary is GPT-2's."""
    record = getattr(model, "tokenizer_record", None)
    if given is not None:
        tok = resolve_tokenizer(given)
        if record is not None and tok is not None:
            from tokembed.tokenizer import identity_from_manifest, tokenizer_identity

            recorded, asked = identity_from_manifest(record), tokenizer_identity(tok)
            if not asked.same_ids(recorded):
                raise ValueError(
                    f"the model was trained on ids of {recorded.describe()}, but tokenizer={asked.describe()} was "
                    "given; drop tokenizer= (the model's own is used)"
                )
        return tok
    if record is not None:
        return _recorded_tokenizer(record)
    config = getattr(model, "config", None)
    vocab, eot = int(getattr(config, "vocab_size", rows)), int(getattr(config, "eot_token", GPT2_EOT))
    if vocab >= GPT2_N_VOCAB and eot == GPT2_EOT:  # GPT-2's ids (a vocabulary padded past 50,257 included)
        return "gpt2"
    raise ValueError(
        f"{type(model).__name__} has {vocab:,} token rows and end-of-text id {eot}, not GPT-2's (50,257 and "
        f"{GPT2_EOT}), and records no tokenizer: its labels would be wrong. Pass tokenizer= the tokenizer its data "
        "was prepared with (e.g. tokenizer='o200k_base'), or load it with tokembed.load_checkpoint (which records it)"
    )


def resolve_tokenizer(tokenizer: TokenizerLike | None) -> Tokenizer | None:
    """The `Tokenizer` a name, file or object stands for (checked: a `tokembed.Tokenizer`); None or ``"none"``:
    a table whose rows are only ids."""
    if tokenizer is None or tokenizer == "none":
        return None
    from tokembed.tokenizer import get_tokenizer

    return get_tokenizer(tokenizer)


def as_table_tensor(name: str, value) -> torch.Tensor:
    if isinstance(value, np.ndarray):
        value = torch.from_numpy(np.ascontiguousarray(value))
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a (rows, dim) torch.Tensor or numpy array, got {type(value).__name__}")
    if value.ndim != 2 or value.shape[0] < 1 or value.shape[1] < 1:
        raise ValueError(f"{name} must have shape (rows, dim) with rows, dim >= 1, got shape {tuple(value.shape)}")
    if not value.dtype.is_floating_point:
        raise TypeError(f"{name} must hold floating-point numbers, got dtype {value.dtype}; convert with .float()")
    value = value.detach().to("cpu", torch.float32)
    if not torch.isfinite(value).all():
        bad = int((~torch.isfinite(value)).any(dim=1).nonzero()[0])
        raise ValueError(f"{name} row {bad} holds NaN or infinity; the table is damaged (did training diverge?)")
    return value.contiguous()


def _as_counts(counts, vocab_size: int) -> torch.Tensor | None:
    if counts is None:
        return None
    counts = torch.as_tensor(np.asarray(counts) if not isinstance(counts, torch.Tensor) else counts)
    if counts.ndim != 1 or counts.dtype.is_floating_point or counts.dtype == torch.bool:
        raise ValueError(
            f"token counts must be a (V,) integer tensor, got dtype {counts.dtype} and shape {tuple(counts.shape)}"
        )
    if counts.shape[0] < vocab_size:  # a corpus counted with a smaller vocabulary: the rest never occurred
        counts = torch.cat([counts, counts.new_zeros(vocab_size - counts.shape[0])])
    return counts[:vocab_size].to(torch.int64)


@dataclass(frozen=True, eq=False)
class EmbeddingTable:
    """A token embedding table with what is needed to label its rows, and optional position vectors.

    Args:
        tokens: (V, D) the token vectors, row ``i`` for token id ``i``.
        tokenizer: a ``tiktoken.Encoding`` or its name (``"gpt2"``) to turn words into ids and ids
            into text; ``None`` for a table without one.
        labels: V labels, used instead of a tokenizer (e.g. the words of a word-level vocabulary).
        positions: (P, D) the absolute position vectors (learned or sinusoidal), if any.
        positional: the checkpoint's positional scheme ("learned", "sinusoidal", "rope", ...).
        source: where the table came from, for messages and reports.
        counts: (V,) how many times each token was read: recorded by ``tokembed train`` in the
            checkpoint, or counted in a corpus (``with_counts``); None when unknown.
        counts_source: where ``counts`` come from, for titles and messages.
        min_count: a token read fewer times is under-trained (default ``MIN_COUNT``, 10): answers mark it.
    """

    tokens: torch.Tensor
    tokenizer: TokenizerLike | None = None
    labels: Sequence[str] | None = None
    positions: torch.Tensor | None = None
    positional: str = "none"
    source: str = ""
    counts: torch.Tensor | None = None
    counts_source: str = ""
    min_count: int = MIN_COUNT
    _label_index: dict[str, int] = field(default_factory=dict, init=False, repr=False)  # label -> first row

    @property
    def _tokenizer(self) -> Tokenizer | None:
        return cast("Tokenizer | None", self.tokenizer)  # a name or file was resolved in __post_init__

    def __post_init__(self) -> None:
        object.__setattr__(self, "tokens", as_table_tensor("the token table", self.tokens))
        object.__setattr__(self, "tokenizer", resolve_tokenizer(self.tokenizer))
        object.__setattr__(self, "counts", _as_counts(self.counts, self.vocab_size))
        check_min_count(self.min_count)
        if self.positions is not None:
            pos = as_table_tensor("the position table", self.positions)
            if pos.shape[1] != self.dim:
                raise ValueError(
                    f"the position table has shape {tuple(pos.shape)} but the token table {tuple(self.tokens.shape)}; their widths (dim) must match"
                )
            object.__setattr__(self, "positions", pos)
            if self.positional == "none":
                object.__setattr__(self, "positional", "learned")
        if self.labels is not None:
            labels = tuple(str(x) for x in self.labels)
            if len(labels) != self.vocab_size:
                raise ValueError(
                    f"{len(labels)} labels given for a table of {self.vocab_size} rows; give one label per row"
                )
            object.__setattr__(self, "labels", labels)
            index: dict[str, int] = {}
            for i, lab in enumerate(labels):
                index.setdefault(lab, i)
            object.__setattr__(self, "_label_index", index)

    # ----------------------------------------------------------------- counts
    def with_counts(self, counts, source: str = "", *, min_count: int | None = None) -> EmbeddingTable:
        """This table with other token counts (e.g. ``token_counts(corpus)``), and another ``min_count`` if given."""
        n = self.min_count if min_count is None else min_count
        return dataclasses.replace(self, counts=counts, counts_source=source, min_count=n)

    def with_min_count(self, min_count: int) -> EmbeddingTable:
        """This table, its counts kept, with another threshold for under-trained tokens."""
        return dataclasses.replace(self, min_count=min_count)

    def count(self, token_id: int) -> int | None:
        """How many times the token was read, or None without counts."""
        return None if self.counts is None else int(self.counts[self.check_id(token_id)])

    def is_undertrained(self, token_id: int) -> bool | None:
        """True when the token was read fewer than ``min_count`` times; None without counts."""
        n = self.count(token_id)
        return None if n is None else n < self.min_count

    def undertrained_ids(self) -> torch.Tensor:
        """(n,) ids read fewer than ``min_count`` times, ascending; raises without counts."""
        return torch.nonzero(self.require_counts() < self.min_count).flatten()

    def require_counts(self) -> torch.Tensor:
        """(V,) the counts; a table without them is an error that says how to get them."""
        if self.counts is None:
            raise ValueError(
                f"this table ({self.source or 'no source'}) records no token counts; pass --corpus (the text or shard "
                "folder it was trained on), or use a checkpoint written by this tokembed's `train`, which records them"
            )
        return self.counts

    # ----------------------------------------------------------------- basics
    @property
    def vocab_size(self) -> int:
        return self.tokens.shape[0]

    @property
    def dim(self) -> int:
        return self.tokens.shape[1]

    @functools.cached_property
    def unit(self) -> torch.Tensor:
        """(V, D) the rows scaled to unit length (a zero row stays zero)."""
        return self.tokens / self.tokens.norm(dim=1, keepdim=True).clamp_min(1e-12)

    @functools.cached_property
    def norms(self) -> torch.Tensor:
        """(V,) the Euclidean norm of every token vector."""
        return self.tokens.norm(dim=1)

    def check_id(self, token_id) -> int:
        """Return ``token_id`` as an int if it indexes a row, else raise naming it."""
        check_int("a token id", token_id)
        if not 0 <= token_id < self.vocab_size:
            raise ValueError(
                f"token id {token_id} is outside the table's vocabulary (size {self.vocab_size}): valid ids are 0..{self.vocab_size - 1}"
            )
        return int(token_id)

    def label(self, token_id: int) -> str:
        """The readable text of a token (bytes that are not whole UTF-8 characters shown as ``\\xNN``)."""
        token_id = self.check_id(token_id)
        if self.labels is not None:
            return self.labels[token_id]
        token = self._token_bytes(token_id)
        if token is not None:
            return token.decode("utf-8", errors="backslashreplace")
        return f"<id {token_id}>"

    def key(self, token_id: int) -> str:
        """A label without whitespace, unique per row, for file formats that split on whitespace.

        GPT-2 tokens use ``encoder.json``'s spelling (``" king"`` -> ``"Ġking"``); labels are
        used as they are; rows without either are ``<id N>`` written ``<id_N>``.
        """
        token_id = self.check_id(token_id)
        if self.labels is not None:
            return self.labels[token_id]
        token = self._token_bytes(token_id)
        if token is not None:
            return token.decode("utf-8") if token_id in self._special_ids else gpt2_byte_spelling(token)
        return f"<id_{token_id}>"

    def _token_bytes(self, token_id: int) -> bytes | None:
        """The bytes of a token, or None for a row the tokenizer has no token for (beyond its vocabulary, or an
        unassigned id inside it: cl100k_base has none for 100256 and 100261-100275, o200k_base for 199998 and
        200000-200017, yet models keep rows for them)."""
        tok = self._tokenizer
        if tok is None or token_id >= tok.n_vocab:
            return None
        try:
            return tok.decode_single_token_bytes(token_id)
        except KeyError:
            return None

    @functools.cached_property
    def _special_ids(self) -> frozenset[int]:
        tok = self._tokenizer
        return frozenset(tok.special_tokens.values()) if tok is not None else frozenset()

    # --------------------------------------------------------------- queries
    def ids(self, word: str) -> list[int]:
        """The token ids that represent ``word`` (see the module docstring for the rule)."""
        if not isinstance(word, str):
            raise TypeError(f"a word must be a str, got {word!r} ({type(word).__name__})")
        if word == "":
            raise ValueError("the empty string is not a word; give at least one character")
        if self.labels is not None:
            if word in self._label_index:
                return [self._label_index[word]]
            close = difflib.get_close_matches(word, list(self._label_index), n=3)
            hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
            raise ValueError(f"word {word!r} is not in the table's vocabulary ({self.vocab_size} labels){hint}")
        tok = self._tokenizer
        if tok is None:
            raise ValueError(
                f"this table ({self.source or 'no source'}) has no tokenizer nor labels, so word {word!r} cannot be looked up; give token ids, or load it with tokenizer='gpt2'"
            )
        special = tok.special_tokens
        ids = [special[word]] if word in special else tok.encode_ordinary(word)
        for i in ids:
            if i >= self.vocab_size:
                raise ValueError(
                    f"word {word!r} encodes to token id {i}, outside the table's vocabulary (size {self.vocab_size}); "
                    "was the table trained with another tokenizer or a smaller vocab_size?"
                )
        return ids

    def vector(self, query) -> torch.Tensor:
        """(D,) the vector of a token id, a word, or a given (D,) vector."""
        return self._resolve(query)[0]

    def _resolve(self, query) -> tuple[torch.Tensor, list[int]]:
        """(D,) vector and the ids it was made of (to exclude from answers)."""
        if isinstance(query, (torch.Tensor, np.ndarray)) and getattr(query, "ndim", 0) == 1:
            v = torch.as_tensor(query, dtype=torch.float32)
            if v.shape[0] != self.dim:
                raise ValueError(f"a query vector must have {self.dim} values (the table's dim), got {v.shape[0]}")
            return v, []
        if isinstance(query, str):
            ids = self.ids(query)
            return self.tokens[ids].mean(dim=0), ids  # (n,D) -> (D,): a multi-token word is the mean of its tokens
        if isinstance(query, numbers.Integral) and not isinstance(query, bool):
            i = self.check_id(query)
            return self.tokens[i], [i]
        raise TypeError(
            f"a query must be a token id (int), a word (str) or a ({self.dim},) vector, got {query!r} ({type(query).__name__})"
        )

    def _top(self, scores: torch.Tensor, exclude: Iterable[int], topn: int) -> list[Neighbour]:
        # scores (V,) is a fresh product that this function may overwrite (no copy: it is V floats per query)
        check_int("topn", topn, min=1, noun="an integer")
        excluded = sorted(set(exclude))
        if excluded:
            scores[excluded] = -math.inf
        k = min(int(topn), self.vocab_size - len(excluded))
        values, idx = torch.topk(scores, k)
        return [
            Neighbour(int(i), self.label(int(i)), float(v), self.count(int(i)), self.is_undertrained(int(i)))
            for v, i in zip(values, idx)
        ]

    def neighbours(self, query, *, topn: int = 10) -> list[Neighbour]:
        """The ``topn`` tokens closest to ``query`` by cosine similarity, best first.

        Args:
            query: a token id, a word (a multi-token word is the mean of its tokens) or a (D,) vector.
            topn: how many to return.

        Returns:
            Neighbours, the query's own tokens left out.
        """
        return self.most_similar(positive=[query], topn=topn)

    def neighbours_many(self, queries: Sequence, *, topn: int = 10, batch_size: int = 256) -> list[list[Neighbour]]:
        """``[neighbours(q, topn=topn) for q in queries]``, computed as one matrix product per batch.

        A (B, D) @ (D, V) product reads the table once for ``batch_size`` queries, where one query
        at a time reads all of it (V x D floats) per query: about 10x faster for many queries.
        """
        resolved = [self._resolve(q) for q in queries]
        out: list[list[Neighbour]] = []
        for start in range(0, len(resolved), batch_size):
            chunk = resolved[start : start + batch_size]
            q = torch.stack([v / v.norm().clamp_min(1e-12) for v, _ in chunk])  # (B,D)
            scores = q @ self.unit.T  # (B,D) @ (D,V) -> (B,V)
            out.extend(self._top(row, ids, topn) for row, (_, ids) in zip(scores, chunk))
        return out

    def most_similar(self, positive=(), negative=(), *, topn: int = 10) -> list[Neighbour]:
        """Analogies as gensim's ``KeyedVectors.most_similar`` computes them.

        Each word or id is turned into a unit vector, weighted +1 (positive) or -1 (negative),
        averaged and normalised again; tokens are ranked by cosine similarity to that mean, the
        input words' tokens left out. ``most_similar(positive=[" king", " woman"], negative=[" man"])``
        asks "man is to king as woman is to ?". A given (D,) vector is used as it is, not normalised,
        and a ``(query, weight)`` pair replaces the default weight, as in gensim.
        """
        single = (str, numbers.Integral, torch.Tensor, np.ndarray)
        if isinstance(positive, single):
            positive = [positive]
        if isinstance(negative, single):
            negative = [negative]
        parts, exclude = [], []
        for default, queries in ((1.0, positive), (-1.0, negative)):
            for q in queries:
                weight = default
                if isinstance(q, tuple) and len(q) == 2 and isinstance(q[1], numbers.Real):
                    q, weight = q[0], float(q[1])  # gensim's (key, weight): the weight replaces +1/-1
                v, ids = self._resolve(q)
                if ids:  # a word or id: unit length first, as gensim's get_vector(key, norm=True)
                    v = v / v.norm().clamp_min(1e-12)
                parts.append(weight * v)
                exclude.extend(ids)
        if not parts:
            raise ValueError("most_similar needs at least one positive or negative word")
        mean = torch.stack(parts).mean(dim=0)  # (n,D) -> (D,)
        mean = mean / mean.norm().clamp_min(1e-12)
        return self._top(self.unit @ mean, exclude, topn)  # (V,D) @ (D,) -> (V,)

    def similarity(self, a, b) -> float:
        """Cosine similarity of two words, ids or vectors."""
        va, vb = self.vector(a), self.vector(b)
        return float(va @ vb / (va.norm() * vb.norm()).clamp_min(1e-12))

    def token_table(self, text: str) -> list[TokenRow]:
        """The tokens of ``text`` with their ids and the norms of their vectors.

        ``<|endoftext|>`` in the text is the special token, as in the chapter.
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        tok = self._tokenizer
        if tok is None:
            raise ValueError(
                f"this table ({self.source or 'no source'}) has no tokenizer to split text; load it with tokenizer='gpt2'"
            )
        ids = tok.encode(text, allowed_special=set(tok.special_tokens))
        rows = []
        for p, i in enumerate(ids):
            if i >= self.vocab_size:
                raise ValueError(
                    f"token {p} of the text has id {i}, outside the table's vocabulary (size {self.vocab_size}); was the table trained with another tokenizer?"
                )
            rows.append(TokenRow(p, i, self.label(i), float(self.norms[i]), self.count(i), self.is_undertrained(i)))
        return rows

    # -------------------------------------------------------------- positions
    def _positions(self) -> torch.Tensor:
        if self.positions is None:
            raise ValueError(
                f"this table ({self.source or 'no source'}) has no absolute position vectors (positional scheme: {self.positional}); "
                f"positional structure is defined for {_with_vectors()} positions, which are added to the input"
            )
        return self.positions

    def position_similarity(self) -> torch.Tensor:
        """(P, P) cosine similarity between every pair of position vectors."""
        pos = self._positions()
        unit = pos / pos.norm(dim=1, keepdim=True).clamp_min(1e-12)  # (P,D)
        return unit @ unit.T  # (P,D) @ (D,P) -> (P,P)

    def position_step_distance(self) -> torch.Tensor:
        """(P,) how far each position's vector is from its neighbours: the mean Euclidean distance
        to the vectors of positions ``p - 1`` and ``p + 1`` (the one neighbour at either end).
        A single position has distance 0."""
        pos = self._positions()
        P = pos.shape[0]
        if P == 1:
            return torch.zeros(1)
        step = (pos[1:] - pos[:-1]).norm(dim=1)  # (P-1,): |pos[p+1] - pos[p]|
        total = torch.zeros(P)
        count = torch.zeros(P)
        total[1:] += step
        count[1:] += 1
        total[:-1] += step
        count[:-1] += 1
        return total / count

    # ------------------------------------------------------------- utilities
    def subset(self, ids: Sequence[int]) -> torch.Tensor:
        """(n, D) the rows of ``ids``, checked."""
        return self.tokens[[self.check_id(i) for i in ids]]

    def most_frequent(self, n: int) -> list[int]:
        """The ids of the ``n`` tokens read most often, by the table's counts (ties: the lower id first).

        Without counts (``self.counts is None``) there is no such order: the first ``n`` ids.
        """
        check_int("n", n, min=1, noun="an integer", hint="the number of tokens to keep")
        if self.counts is None:
            return list(range(min(n, self.vocab_size)))
        return torch.argsort(self.counts, descending=True, stable=True)[:n].tolist()

    def info(self) -> dict:
        """What the table is: source, shape, tokenizer, positional scheme, norms, counts (JSON-ready)."""
        return {
            "source": self.source,
            "vocab_size": self.vocab_size,
            "dim": self.dim,
            "tokenizer": getattr(self.tokenizer, "name", None),
            "positional": self.positional,
            "positions": None if self.positions is None else self.positions.shape[0],
            "norm_mean": float(self.norms.mean()),
            "norm_min": float(self.norms.min()),
            "norm_max": float(self.norms.max()),
            "counts": self.counts_source or None,
            "undertrained": None if self.counts is None else int(self.undertrained_ids().numel()),
            "min_count": self.min_count,
        }

    def __repr__(self) -> str:
        tok = getattr(self.tokenizer, "name", None)
        pos = f", positions={tuple(self.positions.shape)}" if self.positions is not None else ""
        return f"EmbeddingTable(tokens={tuple(self.tokens.shape)}, tokenizer={tok!r}{pos}, positional={self.positional!r}, source={self.source!r})"

    # --------------------------------------------------------------- loaders
    @classmethod
    def from_gpt2(cls, path: str | Path, *, tokenizer: TokenizerLike | None = "gpt2") -> EmbeddingTable:
        """GPT-2's own tables from a local Hugging Face or book-layout checkpoint (no download)."""
        from tokembed.model.gpt2_weights import find_gpt2_file, load_gpt2_embeddings

        tables = load_gpt2_embeddings(path)
        return cls(
            tables["wte"],
            tokenizer,
            positions=tables["wpe"],
            positional="learned",
            source=f"GPT-2 {find_gpt2_file(path)}",
        )

    @classmethod
    def from_model(cls, model: Any, *, tokenizer: TokenizerLike | None = None) -> EmbeddingTable:
        """The tables of an in-memory ``tokembed.GPT`` (``model.embed.token``, ``model.embed.position``).

        Sinusoidal positions are computed for ``model.config.context_length`` positions.

        Args:
            model: the GPT.
            tokenizer: the tokenizer of its ids. Default: the one it records (a model from
                ``tokembed.load_checkpoint`` has ``model.tokenizer_record``), else GPT-2's for a model with
                GPT-2's vocabulary; any other model is an error that names its vocabulary. A given tokenizer
                that is not the recorded one is an error naming both.
        """
        embed = getattr(model, "embed", None)
        token = getattr(getattr(embed, "token", None), "weight", None)
        if not isinstance(token, torch.Tensor):
            raise TypeError(
                f"{type(model).__name__} has no model.embed.token.weight; pass a tokembed.GPT (or use EmbeddingTable(tensor, tokenizer))"
            )
        config: Any = getattr(model, "config", None)
        positional = str(getattr(config, "positional", "learned"))
        position = getattr(getattr(embed, "position", None), "weight", None)
        if _vectors(positional) == "formula" and position is None:  # computed by the scheme's module
            options = getattr(config, "positional_options", None)
            position = _formula_positions(positional, options, int(config.context_length), token.shape[1])
        elif _vectors(positional) is None:
            position = None
        return cls(
            token.detach().clone(),
            _model_tokenizer(model, token.shape[0], tokenizer),
            positions=None if position is None else position.detach().clone(),
            positional=positional,
            source=type(model).__name__,
        )

    @classmethod
    def from_checkpoint(cls, path: str | Path, *, allow_unverified: bool = False) -> EmbeddingTable:
        """The tables of a ``tokembed train`` checkpoint directory (``config.json`` + ``model.safetensors``),
        verified first (`tokembed.model.checkpoint.verify_checkpoint`: ``allow_unverified`` for a checkpoint
        written before tokembed 0.2, without sha256.json).

        Sinusoidal positions are recomputed (they are not stored); other schemes (RoPE, ALiBi, ...)
        have no position vectors.
        """
        from tokembed.model.checkpoint import read_checkpoint_config, verify_checkpoint

        path = Path(path)
        config = read_checkpoint_config(path)
        verify_checkpoint(path, allow_unverified=allow_unverified)  # first: a damaged file is the one named
        model = config.get("model", {})
        weights = path / "model.safetensors"
        if not weights.is_file():
            raise FileNotFoundError(
                f"{path} has config.json but no model.safetensors; the checkpoint is incomplete (was training interrupted while saving?)"
            )
        from safetensors import SafetensorError

        from tokembed.model.checkpoint import open_safetensors

        try:
            with open_safetensors(weights) as f:
                keys = set(f.keys())
                if "embed.token.weight" not in keys:
                    raise ValueError(
                        f"{weights} has no 'embed.token.weight' (keys: {', '.join(sorted(keys)[:10])}); it is not a tokembed model"
                    )
                tokens = f.get_tensor("embed.token.weight")
                positions = f.get_tensor("embed.position.weight") if "embed.position.weight" in keys else None
        except SafetensorError as e:
            raise ValueError(f"{weights} is not a readable safetensors file ({e})") from e
        positional = str(model.get("positional", "learned" if positions is not None else "none"))
        vocab_size, dim = model.get("vocab_size"), model.get("dim")
        if (vocab_size is not None and tokens.shape[0] != vocab_size) or (dim is not None and tokens.shape[1] != dim):
            raise ValueError(
                f"{weights}: embed.token.weight has shape {tuple(tokens.shape)} but config.json says vocab_size={vocab_size}, dim={dim}; the checkpoint is inconsistent"
            )
        if _vectors(positional) == "formula" and positions is None:
            from tokembed.model.config import GPTConfig

            gpt = GPTConfig.from_dict(model)  # 0.1's layout too
            positions = _formula_positions(positional, gpt.positional_options, gpt.context_length, gpt.dim)
        elif _vectors(positional) == "table" and positions is None:
            raise ValueError(
                f"{weights}: config.json says {positional} positions but 'embed.position.weight' is missing; the checkpoint is incomplete"
            )
        elif _vectors(positional) is None:
            positions = None
        from tokembed._paths import shown
        from tokembed.training.counts import read_token_counts

        counts = read_token_counts(path)
        return cls(
            tokens,
            _checkpoint_tokenizer(config),
            positions=positions,
            positional=positional,
            source=shown(path),  # a label: printable and drawable for any folder name
            counts=counts,
            counts_source="" if counts is None else f"recorded by train: input ids of {config.get('step', 0):,} steps",
        )

    @classmethod
    def from_file(cls, path: str | Path, *, tokenizer: TokenizerLike | None = "gpt2") -> EmbeddingTable:
        """An exported table: ``.npy`` (V, D), or ``.safetensors`` written by ``tokembed export``."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"embedding table {path} does not exist")
        if path.suffix == ".npy":
            try:
                arr = np.load(path, allow_pickle=False)
            except ValueError as e:
                raise ValueError(f"{path} is not a plain .npy array ({e}); save the table with numpy.save") from e
            return cls(arr, tokenizer, source=str(path))
        if path.suffix == ".safetensors":
            from safetensors import SafetensorError, safe_open

            try:
                with safe_open(str(path), framework="pt") as f:
                    meta = f.metadata() or {}
                    keys = set(f.keys())
                    if "token_embeddings" in keys:
                        positions = f.get_tensor("position_embeddings") if "position_embeddings" in keys else None
                        return cls(
                            f.get_tensor("token_embeddings"),
                            meta.get("tokenizer", tokenizer),
                            positions=positions,
                            positional=meta.get("positional", "learned" if positions is not None else "none"),
                            source=str(path),
                            counts=f.get_tensor("token_counts") if "token_counts" in keys else None,
                            counts_source=meta.get("counts_source", ""),
                        )
                    if "embed.token.weight" in keys:  # a tokembed model file on its own
                        positions = f.get_tensor("embed.position.weight") if "embed.position.weight" in keys else None
                        return cls(f.get_tensor("embed.token.weight"), tokenizer, positions=positions, source=str(path))
            except SafetensorError as e:
                raise ValueError(f"{path} is not a readable safetensors file ({e})") from e
            return cls.from_gpt2(path, tokenizer=tokenizer)
        raise ValueError(f"{path} is not an embedding table: expected a .npy or .safetensors file")
