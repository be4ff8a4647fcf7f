"""Under-trained tokens: rows the model (almost) never read, named instead of trusted.

A token that training never read keeps a row moved only by the output layer (tied embeddings) or by
weight decay: its neighbours, analogies and similarities say nothing about the token. tokembed knows
how often each token was read (``token_counts.safetensors`` in the checkpoint, or ``--corpus``), so a
token read fewer than ``min_count`` times (default 10, ``tokembed.training.counts.MIN_COUNT``) is marked
under-trained wherever it appears in an answer.

Land & Bartolo 2024 ("Fishing for Magikarp: Automatically Detecting Under-trained Tokens in Large
Language Models") find such tokens without counts, from the table alone, by comparing each row with
rows known to be unused. Two of their indicators are computed here, lower meaning "more like the
unused rows":

* ``norm``: the row's Euclidean norm (their E_in L2 norm, meant for untied input embeddings: a
  row never read stays near its small initial values);
* ``cosine``: the cosine distance of the row to the mean of the known-unused rows after the first
  principal component is removed from every row (their "cosine distance w/o 1st PC": the first
  component is the direction that all rows share, which would make every cosine look alike).

The known-unused rows are the single-byte tokens of bytes that never occur in UTF-8 text (RFC 3629:
C0, C1, F5-FF; for GPT-2 ids 124, 125, 177-187), so no count is needed to find them. With counts at
hand, ``detection`` measures how well each indicator finds the truly unseen rows (count 0): a row is
flagged when its indicator is at most the largest value among the known-unused rows, and precision and
recall are taken against the counts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from tokembed.tokenizer.base import Tokenizer

__all__ = [
    "Detection",
    "Undertrained",
    "UndertrainedToken",
    "detection",
    "indicators",
    "known_unused_ids",
    "undertrained_tokens",
]

NEVER_IN_UTF8 = (0xC0, 0xC1, *range(0xF5, 0x100))  # RFC 3629, section 1: these octets never appear in UTF-8
INDICATORS = ("norm", "cosine")


def known_unused_ids(tokenizer: Tokenizer | None, vocab_size: int) -> list[int]:
    """Ids of the single-byte tokens whose byte never occurs in UTF-8 text (none without such tokens)."""
    if tokenizer is None:
        return []
    encode = getattr(tokenizer, "encode_single_token", None)  # tiktoken: a dictionary lookup per byte
    if encode is None:  # any other tokenizer: find the rows that decode to one such byte
        wanted = {bytes([b]) for b in NEVER_IN_UTF8}
        return [i for i in range(vocab_size) if _token_bytes(tokenizer, i) in wanted]
    ids = []
    for b in NEVER_IN_UTF8:
        try:
            i = encode(bytes([b]))
        except (KeyError, ValueError):
            continue
        if 0 <= i < vocab_size:
            ids.append(int(i))
    return ids


def _token_bytes(tokenizer: Tokenizer, token_id: int) -> bytes | None:
    try:
        return tokenizer.decode_single_token_bytes(token_id)
    except (KeyError, ValueError, IndexError):
        return None


def _without_first_pc(x: torch.Tensor) -> torch.Tensor:
    # Magikarp: the first principal direction of the centred rows, projected out of the raw rows.
    _, _, vh = torch.linalg.svd(x - x.mean(dim=0), full_matrices=False)  # vh (min(V,D), D)
    pc = vh[0]  # (D,)
    return x - torch.outer(x @ pc, pc)  # (V,D) - (V,1)(1,D)


def indicators(tokens: torch.Tensor, reference: list[int]) -> dict[str, torch.Tensor]:
    """(V, D) rows -> {"norm": (V,), "cosine": (V,)}; lower means more like the known-unused ``reference`` rows.

    ``cosine`` is left out when there are no reference rows.
    """
    x = tokens.double()
    out = {"norm": x.norm(dim=1)}
    if reference:
        w = _without_first_pc(x)  # (V,D)
        mean = w[reference].mean(dim=0)  # (D,)
        out["cosine"] = 1.0 - (w @ mean) / (w.norm(dim=1) * mean.norm()).clamp_min(1e-12)
    return out


@dataclass(frozen=True)
class Detection:
    """How well one indicator finds the rows never read (count 0).

    Attributes:
        indicator: ``"norm"`` or ``"cosine"``.
        threshold: rows at or below it are flagged (the largest value among the known-unused rows).
        flagged: rows flagged.
        unseen: rows never read (the truth).
        hits: flagged rows that were never read.
        precision: ``hits / flagged``; recall: ``hits / unseen``; base_rate: ``unseen / rows``,
            the precision of flagging at random.
        average_precision: of the ranking by the indicator (no threshold), 1 when every unseen row
            comes before every read one.
    """

    indicator: str
    threshold: float
    flagged: int
    unseen: int
    hits: int
    precision: float
    recall: float
    base_rate: float
    average_precision: float


def _average_precision(values: torch.Tensor, truth: torch.Tensor) -> float:
    hits = truth[torch.argsort(values, stable=True)].double()  # (V,) 1 where the row at that rank is unseen
    if hits.sum() == 0:
        return float("nan")
    precision_at = torch.cumsum(hits, 0) / torch.arange(1, hits.shape[0] + 1, dtype=torch.float64)
    return float((precision_at * hits).sum() / hits.sum())


def detection(values: torch.Tensor, counts: torch.Tensor, reference: list[int], *, name: str) -> Detection:
    """Score one indicator's (V,) ``values`` against the (V,) ``counts`` (see ``Detection``)."""
    truth = counts[: values.shape[0]] == 0  # (V,)
    threshold = float(values[reference].max())
    flagged = values <= threshold
    hits, n_flagged, unseen = int((flagged & truth).sum()), int(flagged.sum()), int(truth.sum())
    return Detection(
        indicator=name,
        threshold=threshold,
        flagged=n_flagged,
        unseen=unseen,
        hits=hits,
        precision=hits / n_flagged if n_flagged else float("nan"),
        recall=hits / unseen if unseen else float("nan"),
        base_rate=unseen / truth.shape[0],
        average_precision=_average_precision(values, truth),
    )


@dataclass(frozen=True)
class UndertrainedToken:
    """One token read fewer than ``min_count`` times, with Magikarp's indicators (lower: more like unused rows)."""

    id: int
    token: str
    count: int
    norm: float
    cosine: float | None


@dataclass(frozen=True)
class Undertrained:
    """What ``undertrained_tokens`` finds.

    Attributes:
        tokens: the under-trained tokens, fewest reads first (ties: the cosine indicator, then the
            norm), at most the ``limit`` asked for.
        total: how many tokens are under-trained in all.
        detection: each indicator's ``Detection`` of the rows never read (empty without reference rows).
        reference: the known-unused ids the indicators were measured against.
    """

    tokens: list[UndertrainedToken]
    total: int
    detection: dict[str, Detection]
    reference: list[int]


def undertrained_tokens(table, *, limit: int | None = None) -> Undertrained:
    """The tokens of an ``EmbeddingTable`` read fewer than its ``min_count`` times (it must have counts)."""
    counts = table.require_counts()
    reference = known_unused_ids(table.tokenizer, table.vocab_size)
    values = indicators(table.tokens, reference)
    found = {name: detection(v, counts, reference, name=name) for name, v in values.items()} if reference else {}
    ids = table.undertrained_ids().numpy()
    cosine = values.get("cosine")
    keys = [values["norm"][ids].numpy(), counts[ids].numpy()]
    if cosine is not None:
        keys.insert(1, cosine[ids].numpy())
    order = ids[np.lexsort(keys)][:limit]  # last key first: count, then cosine, then norm
    rows = [
        UndertrainedToken(
            int(i),
            table.label(int(i)),
            int(counts[i]),
            float(values["norm"][i]),
            None if cosine is None else float(cosine[i]),
        )
        for i in order
    ]
    return Undertrained(rows, int(ids.shape[0]), found, reference)
