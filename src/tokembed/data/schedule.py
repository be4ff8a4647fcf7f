"""The arithmetic of a mixture's global order: which source and which of its windows each slot takes.

Torch-free and file-free: `tokembed.Mixture` (one set of weights) and `tokembed.PhasedMixture` (weights that
change over training) are built on it, and `tokembed.data.mixture_windows` turns its answers into windows.

The global order is a sequence of slots ``0, 1, 2, ...``; slot ``p`` takes the next window of one source.
With one set of weights the choice of source is a *quota schedule* (`QuotaSchedule`): with weights
``q_i / Q`` (integers summing to ``Q``), the first ``K`` slots hold ``c_i(K)`` windows of source ``i`` with
``|c_i(K) - K q_i / Q| < 1`` for every ``K`` and every ``i``.

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

A phased mixture strings quota schedules together (`PhaseSchedule`; the decisions are in
`tokembed.data.phases`): phase ``k`` starts at slot ``first_slot(start_k, max_length)`` with its own quota
schedule, and continues each source's draws where the earlier phases left them. `check_resume` says whether
a loader state saved at some slot may resume with another schedule: phases that had started must be equal.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

__all__ = [
    "PERIOD_MAX",
    "RESUME_KEYS",
    "Phase",
    "PhaseSchedule",
    "QuotaSchedule",
    "check_resume",
    "first_slot",
    "quota_period",
    "quota_table",
    "sources_fingerprint",
]

PERIOD_MAX = 1 << 16  # the longest period: 64 KiB of source numbers + 512 KiB of ranks


def quota_period(weights: list[float]) -> tuple[list[int], int]:
    """Integer weights ``q`` summing to the period ``Q``: exact when the weights' denominator is <= PERIOD_MAX."""
    fracs = [Fraction(w).limit_denominator(PERIOD_MAX) for w in weights]
    if all(float(f) == w for f, w in zip(fracs, weights)):  # the weights are these small fractions
        exact = sum(fracs, Fraction(0))
        norm = [f / exact for f in fracs]
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


class QuotaSchedule:
    """The quota schedule of integer weights ``q`` (summing to ``period``): slot -> (source, draw).

    One set of weights, periodic. (A `tokembed.PhasedMixture` strings one per phase together: its
    `tokembed.data.phases.PhaseSchedule` answers the same two questions.)

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
        self.q, self.period = tuple(state["q"]), int(state["period"])
        self._q = np.asarray(self.q, dtype=np.int64)

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

    def slot_of_draw(self, source: int, draw: int) -> int | None:
        """The slot that holds draw ``draw`` of ``source`` (the inverse of `draws`), or None for a source of weight 0."""
        q = self.q[source]
        if not q:
            return None
        cycle, r = divmod(int(draw), q)
        return cycle * self.period + int(_slots_of(self.q, self.period, source)[r])


@functools.lru_cache(maxsize=64)
def _slots_of(q: tuple[int, ...], period: int, source: int) -> np.ndarray:
    """The slots of one period of the quota table ``q`` that go to ``source``, in order."""
    return np.flatnonzero(quota_table(q, period)[0] == source)


# The loader config keys a phased state's resume compares itself (`check_resume`); the loader compares the rest.
RESUME_KEYS = ("data", "n_tokens", "windows", "phases", "sources", "weights")


def first_slot(start: int, max_length: int) -> int:
    """The slot a phase starting at token ``start`` starts at: ``ceil(start / max_length)``."""
    return -(-int(start) // int(max_length))


@dataclass(frozen=True)
class Phase:
    """One phase of a mixture: from training token ``start`` until the next phase starts.

    Attributes:
        number: its place in the schedule, from 1.
        name: a name given to it, or None.
        start: its first training token.
        listed: ``(source number, weight as given)`` for each source it lists, in its order.
        q: its integer weights over all the mixture's sources (0 for sources it leaves out); they sum to ``period``.
        period: the length of its quota table.
    """

    number: int
    name: str | None
    start: int
    listed: tuple[tuple[int, float], ...]
    q: tuple[int, ...]
    period: int

    @property
    def label(self) -> str:
        """How messages name it: ``phase 2 'anneal' (from token 800,000,000)``."""
        name = f" {self.name!r}" if self.name else ""
        return f"phase {self.number}{name} (from token {self.start:,})"

    @property
    def weights(self) -> tuple[Fraction, ...]:
        """The normalised weight of every source of the mixture in this phase, ``q_i / Q`` (0 for those it leaves out)."""
        return tuple(Fraction(qi, self.period) for qi in self.q)

    def record(self) -> dict[str, Any]:
        """What a loader's state keeps of it: number, name, start and the exact weights of the sources it reads."""
        weights = [[i, f"{w.numerator}/{w.denominator}"] for i, w in enumerate(self.weights) if w]
        return {"number": self.number, "name": self.name, "start": self.start, "weights": weights}


class PhaseSchedule:
    """Slots of a phased mixture's global order -> ``(source, draw)``, for windows of one length.

    Args:
        phases: the mixture's phases.
        first_slots: the slot each phase starts at (`first_slot`), strictly increasing from 0.

    Attributes:
        quotas: one `QuotaSchedule` per phase.
        base: (phases, sources) int64: each source's draws before each phase.
    """

    def __init__(self, phases: Sequence[Phase], first_slots: Sequence[int]) -> None:
        self.phases, self.first_slots = tuple(phases), tuple(int(p) for p in first_slots)
        self.quotas = [QuotaSchedule(ph.q, ph.period) for ph in self.phases]
        self._first = np.asarray(self.first_slots, dtype=np.int64)  # (K,)
        base = np.zeros((len(self.phases), len(self.phases[0].q)), dtype=np.int64)  # (K, S)
        for k in range(1, len(self.phases)):
            base[k] = base[k - 1] + self.quotas[k - 1].counts(self.first_slots[k] - self.first_slots[k - 1])
        self.base = base

    def phase_of(self, slots: np.ndarray) -> np.ndarray:
        """The phase (0-based) holding each slot: same shape, int64."""
        return np.searchsorted(self._first, np.asarray(slots, dtype=np.int64), side="right") - 1

    def draws(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(source, draw)`` of each global slot: which source, and which of its windows (0, 1, ...) in its own order."""
        slots = np.asarray(slots, dtype=np.int64)
        if len(self.quotas) == 1:
            return self.quotas[0].draws(slots)
        k = self.phase_of(slots)
        lo, hi = (int(k.min()), int(k.max())) if slots.size else (0, 0)
        if lo == hi:  # a loader's block lies in one phase but for the blocks that cross a boundary
            s, d = self.quotas[lo].draws(slots - self._first[lo])
            return s, d + self.base[lo, s]
        source, draw = np.empty_like(slots), np.empty_like(slots)
        for ph in range(lo, hi + 1):
            sel = k == ph
            s, d = self.quotas[ph].draws(slots[sel] - self._first[ph])
            source[sel], draw[sel] = s, d + self.base[ph, s]
        return source, draw

    def counts(self, n_slots: int) -> np.ndarray:
        """Windows of each source among the first ``n_slots`` slots: (S,) int64."""
        if n_slots <= 0:
            return np.zeros(self.base.shape[1], dtype=np.int64)
        k = int(self.phase_of(np.asarray(n_slots - 1)))
        return self.base[k] + self.quotas[k].counts(n_slots - self.first_slots[k])

    def slot_of_draw(self, source: int, draw: int) -> int | None:
        """The slot that holds draw ``draw`` of ``source``, or None when no phase reaches it."""
        for k in range(len(self.phases)):
            end = self.base[k + 1, source] if k + 1 < len(self.phases) else math.inf
            local = self.quotas[k].slot_of_draw(source, int(draw - self.base[k, source]))  # None: weight 0 here
            if local is not None and self.base[k, source] <= draw < end:
                return self.first_slots[k] + local
        return None


def sources_fingerprint(fingerprints: list[str]) -> str:
    """The data fingerprint of a mixture's sources, from each source's (`SlidingWindowDataset.fingerprint`)."""
    h = hashlib.blake2b(digest_size=12)
    h.update(json.dumps(fingerprints).encode())
    return h.hexdigest()


# ----------------------------------------------------------------------------------------- resume


def _saved_phases(saved: dict[str, Any]) -> list[dict[str, Any]]:
    """A loader config's phases; a `Mixture`'s state (weights only) is one phase from token 0."""
    if "phases" in saved:
        return [dict(ph, weights={int(i): w for i, w in ph["weights"]}) for ph in saved["phases"]]
    weights = {i: w for i, w in enumerate(saved.get("weights") or []) if Fraction(w)}
    return [{"number": 1, "name": None, "start": 0, "weights": weights}]


def _describe(ph: dict[str, Any]) -> str:
    name = f" {ph['name']!r}" if ph.get("name") else ""
    return f"phase {ph['number']}{name} (from token {ph['start']:,})"


def _weights_text(weights: dict[int, str], paths: list[str]) -> str:
    return (
        "["
        + ", ".join(f"{paths[i] if i < len(paths) else f'source {i}'}: {w}" for i, w in sorted(weights.items()))
        + "]"
    )


def _by_path(weights: dict[int, str], paths: list[str]) -> dict[str, str]:
    return {paths[i] if i < len(paths) else f"source {i}": w for i, w in weights.items()}


def _difference(a: dict[str, Any], b: dict[str, Any], before: list[str], paths: list[str]) -> str:
    """What differs between two phase records: ``start 80 -> 8 tokens; weights [...] -> [...]`` (``a``'s sources
    are ``before``, ``b``'s ``paths``: the source numbers follow the order they are listed in)."""
    parts = []
    if a["start"] != b["start"]:
        parts.append(f"start {a['start']:,} -> {b['start']:,} tokens")
    if a["weights"] != b["weights"] and _by_path(a["weights"], before) == _by_path(b["weights"], paths):
        order = lambda ws, ps: ", ".join(_by_path(ws, ps))  # noqa: E731
        parts.append(
            f"its sources are listed in another order ({order(a['weights'], before)} -> {order(b['weights'], paths)}), "
            "which numbers them and so orders the windows"
        )
    elif a["weights"] != b["weights"]:
        parts.append(f"weights {_weights_text(a['weights'], before)} -> {_weights_text(b['weights'], paths)}")
    if a.get("name") != b.get("name"):
        parts.append(f"name {a.get('name')!r} -> {b.get('name')!r}")
    return "; ".join(parts)


def check_resume(
    saved: dict[str, Any], phases: Sequence[Phase], sources: list[dict[str, Any]], *, slot: int, max_length: int
) -> list[str]:
    """Compare the schedule a loader state was saved with (at global slot ``slot``) with ``phases``.

    The phases that had started must be the same (start and weights, and the data of their sources); the
    phases after ``slot`` may differ: the differences come back as sentences for the log.

    Args:
        saved: the saved loader config (``phases`` and ``sources``, or a `Mixture`'s ``weights`` and ``data``).
        phases: the resuming mixture's phases; ``sources``: its sources' records (path, data, windows).
        slot: the saved position in the global order; ``max_length``: tokens per window.

    Raises:
        ValueError: a started phase changed, was removed, or a phase would now start before ``slot``; or a
            source read so far holds other data. Names the phase and the values.
    """
    old = _saved_phases(saved)
    new = [dict(ph.record(), weights={int(i): w for i, w in ph.record()["weights"]}) for ph in phases]
    paths = [s["path"] for s in sources]
    before = [s["path"] for s in saved.get("sources") or []] or paths  # the saved phases' sources (by number)
    at = f"the state's position, token {slot * max_length:,} (window {slot:,})"
    started = [ph for ph in old if first_slot(ph["start"], max_length) < slot]
    for k, ph in enumerate(started):
        mine = new[k] if k < len(new) else None
        if mine is None or (mine["start"], mine["weights"]) != (ph["start"], ph["weights"]):
            what = "it is gone" if mine is None else _difference(ph, mine, before, paths)
            raise ValueError(
                f"{_describe(ph)} had started at {at}, so it cannot change ({what}); change only phases that "
                f"start after token {slot * max_length:,}, or start a new run"
            )
    _check_sources_read(saved, started, sources)
    if len(new) > len(started) and first_slot(new[len(started)]["start"], max_length) < slot:
        ph = new[len(started)]
        raise ValueError(
            f"{_describe(ph)} would start before {at}: windows already read would change; start it at token "
            f"{slot * max_length:,} or later"
        )
    return _future_changes(old[len(started) :], new[len(started) :], before, paths)


def _check_sources_read(saved: dict[str, Any], started: list[dict[str, Any]], sources: list[dict[str, Any]]) -> None:
    """The sources the started phases read hold the same data as when the state was saved."""
    read = sorted({i for ph in started for i in ph["weights"]})
    if not read:
        return
    if "phases" not in saved:  # a Mixture's state: one fingerprint over all of its sources
        if saved.get("data") != sources_fingerprint([sources[i]["data"] for i in range(len(saved.get("weights", [])))]):
            raise ValueError(
                f"the state was saved by a loader over another dataset: the sources of phase 1 "
                f"({', '.join(sources[i]['path'] for i in read)}) hold other data; resume with the same data"
            )
        return
    before = saved.get("sources") or []
    for i in read:
        if i >= len(before) or i >= len(sources) or before[i]["data"] != sources[i]["data"]:
            then = before[i]["path"] if i < len(before) else f"source {i}"
            now = sources[i]["path"] if i < len(sources) else "nothing"
            raise ValueError(
                f"the state was saved by a loader over another dataset: source {i} ({then}), read before the "
                f"state was saved, is now {now} with other data; resume with the same data"
            )


def _future_changes(
    old: list[dict[str, Any]], new: list[dict[str, Any]], before: list[str], paths: list[str]
) -> list[str]:
    """Sentences for the log: the phases after the resume point that were added, changed or removed."""
    notes = []
    for a, b in zip(old, new):
        change = _difference(a, b, before, paths)
        if change:
            notes.append(f"the schedule changes {_describe(a)}: {change}")
    notes += [
        f"the schedule adds {_describe(b)}: weights {_weights_text(b['weights'], paths)}" for b in new[len(old) :]
    ]
    notes += [f"the schedule drops {_describe(a)}" for a in old[len(new) :]]
    return notes
