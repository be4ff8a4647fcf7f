"""Mixtures of corpora in exact proportions: which source each window of the global order comes from.

A `Mixture` names shard folders (or Megatron prefixes) and their weights. Its *global order* is a
sequence of slots ``0, 1, 2, ...``; slot ``p`` takes the next window of one source. The choice of source
is a *quota schedule*: with weights ``q_i / Q`` (integers summing to ``Q``), the first ``K`` slots hold
``c_i(K)`` windows of source ``i`` with ``|c_i(K) - K q_i / Q| < 1`` for every ``K`` and every ``i``.

Derivation. Write ``w_i = q_i / Q``. The bound holds exactly when ``floor(w_i K) <= c_i(K) <= ceil(w_i K)``
for all ``K`` (when ``w_i K`` is an integer both sides are equal). Read as a schedule of unit jobs on one
machine, the ``m``-th window of source ``i`` (``m = 1, 2, ...``) must be placed

- no later than slot ``D = ceil(m / w_i)`` (else ``c_i(D) < m <= w_i D``: under the lower bound), and
- no earlier than slot ``R = floor((m - 1) / w_i) + 1`` (placed at a slot ``K < R``, ``w_i K <= m - 1``,
  so ``c_i(K) >= m > ceil(w_i K)``: over the upper bound),

slots counted from 1. A schedule meeting every window ``[R, D]`` exists for any weights (Balinski and
Young's quota method, 1975; Tijdeman's chairman assignment, 1980). For unit jobs with integer release
times and deadlines, earliest-deadline-first among the released jobs meets every deadline whenever any
schedule does (the exchange argument: swapping a job with a later deadline behind one with an earlier
deadline never makes a feasible schedule infeasible), so EDF builds one; ties go to the lower source
number, which makes it deterministic. Within ``Q`` slots source ``i`` gets exactly ``q_i`` windows (its
``q_i``-th deadline is ``ceil(q_i Q / q_i) = Q`` and its next release is ``Q + 1``), so the counts are
exact at ``K = Q`` and the schedule of slots ``Q+1 .. 2Q`` is the first period again: the table of one
period (``Q`` bytes and ``Q`` int64 ranks) gives every slot by arithmetic, ``O(1)`` per slot, without an
index over the windows. `tests/test_mixture.py` checks the bound over every prefix for random weights.

The period ``Q`` is the least common denominator of the normalised weights when it is at most
``PERIOD_MAX`` (65,536): 0.7/0.2/0.1 give ``Q = 10``, exact. Other weights are rounded to multiples of
``1 / PERIOD_MAX`` by largest remainders (each moves by less than ``1 / PERIOD_MAX``); `Mixture.weights`
reports the weights the bound holds for.

Within a source, draw ``j`` (its ``j``-th window of the global order, from 0) is position ``j mod n_i``
of the source's epoch ``j div n_i``; each epoch is a fresh keyed permutation of the source's windows
(`FeistelPermutation`, re-keyed per source and epoch). So a source that runs out starts again in a new
order, and no window of a source is read twice before all its windows are read once.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Mapping
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from tokembed._checks import check_int
from tokembed._paths import local_path

__all__ = ["PERIOD_MAX", "Mixture", "MixtureSchedule", "parse_source", "quota_period", "quota_table"]

PERIOD_MAX = 1 << 16  # the longest period: 64 KiB of source numbers + 512 KiB of ranks


def quota_period(weights: list[float]) -> tuple[list[int], int]:
    """Integer weights ``q`` summing to the period ``Q``: exact when the weights' denominator is <= PERIOD_MAX."""
    fracs = [Fraction(w).limit_denominator(PERIOD_MAX) for w in weights]
    if all(float(f) == w for f, w in zip(fracs, weights)):  # the weights are these small fractions
        total = sum(fracs)
        norm = [f / total for f in fracs]
        period = math.lcm(*(f.denominator for f in norm))
        if period <= PERIOD_MAX:
            return [int(f * period) for f in norm], period
    total = math.fsum(weights)
    ideal = [w / total * PERIOD_MAX for w in weights]
    q = [math.floor(x) for x in ideal]
    by_remainder = sorted(range(len(q)), key=lambda i: (q[i] - ideal[i], i))  # largest remainder first
    for i in by_remainder[: PERIOD_MAX - sum(q)]:
        q[i] += 1
    return q, PERIOD_MAX


@functools.lru_cache(maxsize=8)
def quota_table(q: tuple[int, ...], period: int) -> tuple[np.ndarray, np.ndarray]:
    """One period of the quota schedule: ``(source, rank)`` of each slot, (Q,) uint8 and (Q,) int64.

    ``rank[k]`` counts the slots before ``k`` that went to the same source (earliest deadline first,
    see the module's notes).
    """
    count = [0] * len(q)
    release = [0] * len(q)  # 0-based slot from which the source's next window may go
    deadline = [-(-period // qi) - 1 if qi else period for qi in q]  # 0-based slot by which it must go
    live = [i for i, qi in enumerate(q) if qi]
    source = np.empty(period, np.uint8)
    rank = np.empty(period, np.int64)
    for k in range(period):
        best = min((i for i in live if release[i] <= k), key=deadline.__getitem__)
        source[k], rank[k] = best, count[best]
        c = count[best] = count[best] + 1
        release[best] = c * period // q[best]
        deadline[best] = -(-(c + 1) * period // q[best]) - 1
    source.flags.writeable = rank.flags.writeable = False
    return source, rank


class MixtureSchedule:
    """The quota schedule of integer weights ``q`` (summing to ``period``): slot -> (source, draw).

    Attributes:
        q: windows of each source per period.
        period: slots per period (``Q``).
    """

    def __init__(self, q: tuple[int, ...], period: int) -> None:
        self.q, self.period = tuple(int(x) for x in q), int(period)
        self._q = np.asarray(self.q, dtype=np.int64)

    def __getstate__(self) -> dict[str, Any]:
        return {"q": self.q, "period": self.period}  # workers rebuild the table (cached per process)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["q"], state["period"])

    def draws(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(source, draw)`` of each global slot: which source, and which of its windows (0, 1, ...) in its own order."""
        source, rank = quota_table(self.q, self.period)
        cycle, k = np.divmod(np.asarray(slots, dtype=np.int64), self.period)
        s = source[k].astype(np.int64)
        return s, cycle * self._q[s] + rank[k]

    def counts(self, n_slots: int) -> np.ndarray:
        """Windows of each source among the first ``n_slots`` slots: (S,) int64."""
        source, _ = quota_table(self.q, self.period)
        cycles, rest = divmod(int(n_slots), self.period)
        return cycles * self._q + np.bincount(source[:rest], minlength=len(self.q)).astype(np.int64)


def _check_weight(path: object, w: object) -> float:
    if isinstance(w, bool) or not isinstance(w, (int, float, np.integer, np.floating, Fraction)):
        raise TypeError(f"the weight of source {path} must be a number, got {w!r} ({type(w).__name__})")
    x = float(w)
    if not math.isfinite(x) or x < 0:
        raise ValueError(
            f"the weight of source {path} must be a finite number >= 0, got {w!r}; weights are relative (0.7, 0.2, 0.1 or 7, 2, 1)"
        )
    return x


def parse_source(text: str) -> tuple[str, float]:
    """``"PATH:WEIGHT"`` (the CLI's ``--source``) -> ``(PATH, WEIGHT)``; the last colon separates them."""
    path, sep, weight = text.rpartition(":")
    try:
        value = float(weight)
    except ValueError:
        value = None
    if not sep or not path or value is None:
        raise ValueError(
            f"--source {text!r} is not PATH:WEIGHT; write e.g. --source shards/web:0.7 --source shards/code:0.3"
        )
    return path, value


def source_tokenizer(path: Path):
    """The `TokenizerIdentity` a source records (its manifest's; a Megatron export's sidecar), or None."""
    from tokembed.shards import megatron
    from tokembed.shards.format import read_manifest
    from tokembed.tokenizer.registry import identity_from_manifest

    entry = megatron.recorded_tokenizer(path) if megatron.is_megatron_prefix(path) else read_manifest(path)["tokenizer"]
    return identity_from_manifest(entry) if entry else None


class Mixture:
    """Shard folders read together in fixed proportions, by formula.

    ``Mixture({"shards/web": 0.7, "shards/code": 0.2, "shards/books": 0.1}, seed=0)`` is accepted wherever
    a shard folder is (`SlidingWindowDataset`, `create_dataloader`, `train`, `stats`). Weights are
    relative and normalised. In every prefix of ``K`` windows of the global order, source ``i`` gives
    ``c_i`` windows with ``|c_i - weights[i] * K| < 1`` (see the module's notes). A source that runs
    out starts again in a fresh order of its own windows.

    Args:
        sources: ``{path: weight}``, or ``(path, weight)`` pairs; a path is a shard folder or a
            Megatron ``.bin``/``.idx`` prefix. Weights are numbers >= 0 with a positive sum.
        seed: selects each source's orders (with the loader's seed), int >= 0.

    Attributes:
        paths: the sources, in the given order (source ``i``).
        weights: the normalised weights the bound holds for, as exact fractions ``q_i / Q``.
        schedule: the `MixtureSchedule`.
        tokenizer: the sources' `TokenizerIdentity` (None when none records one).

    Raises:
        ValueError: no source, a weight that is negative, NaN or infinite, weights that sum to 0, a
            positive weight under ``1 / 131072`` of the total, a source listed twice, a missing or
            damaged source, or sources tokenized by different tokenizers (names both).
    """

    def __init__(self, sources: Mapping[Any, Any] | Any, *, seed: int = 0) -> None:
        pairs = list(sources.items()) if isinstance(sources, Mapping) else [tuple(p) for p in sources]
        if not pairs:
            raise ValueError(
                "a Mixture needs at least one source, e.g. Mixture({'shards/web': 0.7, 'shards/code': 0.3})"
            )
        if len(pairs) > 255:
            raise ValueError(f"a Mixture takes at most 255 sources, got {len(pairs)}; merge some folders first")
        self.seed = check_int("seed", seed, min=0)
        self.paths = tuple(local_path(os.fspath(p), what="the mixture source") for p, _ in pairs)
        raw = [_check_weight(p, w) for p, w in pairs]
        self.given_weights = tuple(raw)
        if math.fsum(raw) <= 0:
            raise ValueError(f"the weights {raw} sum to 0; give at least one source a positive weight")
        self._check_paths()
        q, period = quota_period(raw)
        small = [str(p) for p, w, qi in zip(self.paths, raw, q) if w > 0 and qi == 0]
        if small:
            raise ValueError(
                f"the weight of {', '.join(small)} is under 1/{2 * PERIOD_MAX} of the total, too small to schedule; raise it or leave the source out"
            )
        self.schedule = MixtureSchedule(tuple(q), period)
        self.weights = tuple(Fraction(qi, period) for qi in q)
        self.tokenizer = self._check_tokenizers()

    def _check_paths(self) -> None:
        seen: dict[Path, Path] = {}
        for p in self.paths:
            key = p.resolve()
            if key in seen:
                raise ValueError(
                    f"source {p} is listed twice (also as {seen[key]}); give each source once with its whole weight"
                )
            seen[key] = p

    def _check_tokenizers(self):
        first = None
        for p in self.paths:
            tok = source_tokenizer(p)
            if tok is None:
                continue  # a Megatron dataset from elsewhere records no tokenizer
            if first is None:
                first = (p, tok)
            elif not first[1].same_ids(tok):
                raise ValueError(
                    f"sources {first[0]} and {p} were tokenized differently: {first[0]} by {first[1].describe()}, "
                    f"{p} by {tok.describe()}; prepare every source with the same tokenizer"
                )
        return None if first is None else first[1]

    def __len__(self) -> int:
        return len(self.paths)

    def __repr__(self) -> str:
        parts = ", ".join(f"{str(p)!r}: {float(w):.6g}" for p, w in zip(self.paths, self.weights))
        return f"Mixture({{{parts}}}, seed={self.seed})"

    def to_dict(self) -> dict[str, Any]:
        """Plain values: the paths, the weights as ``"q/Q"`` strings, and the seed."""
        return {
            "sources": [str(p) for p in self.paths],
            "weights": [f"{w.numerator}/{w.denominator}" for w in self.weights],
            "seed": self.seed,
        }

    def window_dataset_class(self) -> type:
        """`MixtureWindows`: what ``SlidingWindowDataset(mixture, ...)`` builds (imported here: it needs torch)."""
        from tokembed.data.mixture_windows import MixtureWindows

        return MixtureWindows

    def spec(self) -> dict[str, Any]:
        """``{"sources": [[absolute path, weight as given], ...], "seed"}``: JSON, for configs and checkpoints."""
        return {"sources": [[str(p.resolve()), w] for p, w in zip(self.paths, self.given_weights)], "seed": self.seed}

    @classmethod
    def from_spec(cls, spec: Any) -> Mixture:
        """The mixture `spec` describes (a checkpoint's ``data`` entry)."""
        if not isinstance(spec, Mapping) or not isinstance(spec.get("sources"), (list, tuple)) or "seed" not in spec:
            raise ValueError(
                f"{spec!r} does not describe a mixture; expected {{'sources': [[path, weight], ...], 'seed': 0}}"
            )
        return cls([tuple(pair) for pair in spec["sources"]], seed=spec["seed"])

    def state_entries(self) -> dict[str, Any]:
        """What a loader's state records of the mixture beside its data: the weights and the seed."""
        d = self.to_dict()
        return {"weights": d["weights"], "mixture_seed": d["seed"]}
