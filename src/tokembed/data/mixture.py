"""Mixtures of corpora in exact proportions: `Mixture`, and the checks its sources go through.

A `Mixture` names shard folders (or Megatron prefixes) and their weights. Its *global order* is a
sequence of slots ``0, 1, 2, ...``; slot ``p`` takes the next window of one source, chosen by a *quota
schedule*: with weights ``q_i / Q`` (integers summing to ``Q``), the first ``K`` slots hold ``c_i(K)``
windows of source ``i`` with ``|c_i(K) - K q_i / Q| < 1`` for every ``K`` and every ``i``. The schedule,
its derivation (earliest deadline first over each window's release and deadline) and the rounding of
weights to a period of at most 65,536 slots are in `tokembed.data.schedule`; a `tokembed.PhasedMixture`
(`tokembed.data.phases`) strings several together over training.

Within a source, draw ``j`` (its ``j``-th window of the global order, from 0) is position ``j mod n_i``
of the source's epoch ``j div n_i``; each epoch is a fresh keyed permutation of the source's windows
(`FeistelPermutation`, re-keyed per source and epoch). So a source that runs out starts again in a new
order, and no window of a source is read twice before all its windows are read once.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from tokembed._checks import check_int
from tokembed.data.schedule import PERIOD_MAX, Phase, QuotaSchedule, quota_period, quota_table

__all__ = [
    "PERIOD_MAX",
    "Mixture",
    "QuotaSchedule",
    "parse_source",
    "quota_period",
    "quota_table",
]


def check_weight(path: object, w: object, *, where: str = "") -> float:
    """A source's weight as a float >= 0, else an error naming the source (and ``where``: a phase)."""
    at = f"{where}: " if where else ""
    if isinstance(w, bool) or not isinstance(w, (int, float, np.integer, np.floating, Fraction)):
        raise TypeError(f"{at}the weight of source {path} must be a number, got {w!r} ({type(w).__name__})")
    x = float(w)
    if not math.isfinite(x) or x < 0:
        raise ValueError(
            f"{at}the weight of source {path} must be a finite number >= 0, got {w!r}; weights are relative (0.7, 0.2, 0.1 or 7, 2, 1)"
        )
    return x


def quota_of(paths: list, raw: list[float], *, where: str = "") -> tuple[list[int], int]:
    """`quota_period` of checked weights ``raw`` (one per path), refusing a zero sum and unschedulable weights."""
    at = f"{where}: " if where else ""
    if not any(w > 0 for w in raw):  # (not a float sum: weights are relative, and 1e308 + 1e308 overflows)
        raise ValueError(f"{at}the weights {raw} sum to 0; give at least one source a positive weight")
    q, period = quota_period(raw)
    small = [str(p) for p, w, qi in zip(paths, raw, q) if w > 0 and qi == 0]
    if small:
        raise ValueError(
            f"{at}the weight of {', '.join(small)} is under 1/{2 * PERIOD_MAX} of the total, too small to schedule; raise it or leave the source out"
        )
    return q, period


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


def source_tokenizer(path: Path | str, remote: Any = None):
    """The `TokenizerIdentity` a source records (its manifest's; a Megatron export's sidecar), or None.

    A URL's manifest is fetched with the `tokembed.storage.options.RemoteOptions` ``remote``."""
    from tokembed.shards import megatron
    from tokembed.shards.format import checked_manifest, read_manifest
    from tokembed.tokenizer.registry import identity_from_manifest

    if isinstance(path, str):  # a URL
        from tokembed.shards.remote import fetch_manifest
        from tokembed.storage.stores import open_store

        store = open_store(path, None if remote is None else remote.storage_options)
        entry = checked_manifest(fetch_manifest(store), store.where())["tokenizer"]
    elif megatron.is_megatron_prefix(path):
        entry = megatron.recorded_tokenizer(path)
    else:
        entry = read_manifest(path)["tokenizer"]
    return identity_from_manifest(entry) if entry else None


def _shown(p: Path | str) -> str:
    """A source for messages and records: a URL without credentials (`tokembed.storage.urls.public_url`)."""
    from tokembed.storage.urls import public_url

    return public_url(p) if isinstance(p, str) else str(p)


def _source_path(p: Any) -> Path | str:
    """A source as given: a local `Path`, or a URL kept as text (``Path`` folds ``s3://`` to ``s3:/``)."""
    from tokembed.storage.urls import as_url, is_url, local_path_of

    text = os.fspath(p)
    if is_url(text):
        local = local_path_of(text)
        return Path(local) if local is not None else as_url(text)
    return Path(text)


def distinct_sources(paths: Sequence[Path | str]) -> None:
    """Refuse a source listed twice (under two spellings of one path, too; a URL as written)."""
    seen: dict[Path | str, Path | str] = {}
    for p in paths:
        key = p if isinstance(p, str) else p.resolve()
        if key in seen:
            raise ValueError(
                f"source {p} is listed twice (also as {seen[key]}); give each source once with its whole weight"
            )
        seen[key] = p


def common_tokenizer(paths: Sequence[Path | str], labels: list[str] | None = None, remote: Any = None):
    """The `TokenizerIdentity` the sources share (None when none records one); ``labels`` (a phase each) go
    into the message naming two sources tokenized differently; ``remote``: see `source_tokenizer`."""
    first = None
    for i, p in enumerate(paths):
        tok = source_tokenizer(p, remote)
        if tok is None:
            continue  # a Megatron dataset from elsewhere records no tokenizer
        named = f"{p}{f' ({labels[i]})' if labels else ''}"
        if first is None:
            first = (p, named, tok)
        elif not first[2].same_ids(tok):
            raise ValueError(
                f"sources {first[1]} and {named} were tokenized differently: {first[0]} by {first[2].describe()}, "
                f"{p} by {tok.describe()}; prepare every source with the same tokenizer"
            )
    return None if first is None else first[2]


class Mixture:
    """Shard folders read together in fixed proportions, by formula.

    ``Mixture({"shards/web": 0.7, "shards/code": 0.2, "shards/books": 0.1}, seed=0)`` is accepted wherever
    a shard folder is (`SlidingWindowDataset`, `create_dataloader`, `train`, `stats`). Weights are
    relative and normalised. In every prefix of ``K`` windows of the global order, source ``i`` gives
    ``c_i`` windows with ``|c_i - weights[i] * K| < 1`` (see the module's notes). A source that runs
    out starts again in a fresh order of its own windows.

    Args:
        sources: ``{path: weight}``, or ``(path, weight)`` pairs; a path is a shard folder (local, or a URL of
            a remote one: local and remote mix freely) or a Megatron ``.bin``/``.idx`` prefix. Weights are
            numbers >= 0 with a positive sum.
        seed: selects each source's orders (with the loader's seed), int >= 0.
        storage_options, cache_dir, cache_bytes: for the remote sources (see `tokembed.storage.options`);
            never part of `spec` or of a checkpoint.

    Attributes:
        paths: the sources, in the given order (source ``i``).
        weights: the normalised weights the bound holds for, as exact fractions ``q_i / Q``.
        schedule: the `QuotaSchedule` (slot -> source and draw).
        tokenizer: the sources' `TokenizerIdentity` (None when none records one).

    Raises:
        ValueError: no source, a weight that is negative, NaN or infinite, weights that sum to 0, a
            positive weight under ``1 / 131072`` of the total, a source listed twice, a missing or
            damaged source, or sources tokenized by different tokenizers (names both).
    """

    def __init__(
        self,
        sources: Mapping[Any, Any] | Any,
        *,
        seed: int = 0,
        storage_options: Mapping[str, Any] | None = None,
        cache_dir: str | os.PathLike | None = None,
        cache_bytes: int | str | None = None,
    ) -> None:
        from tokembed.storage.options import remote_options

        self.remote = remote_options(storage_options=storage_options, cache_dir=cache_dir, cache_bytes=cache_bytes)
        pairs = list(sources.items()) if isinstance(sources, Mapping) else [tuple(p) for p in sources]
        if not pairs:
            raise ValueError(
                "a Mixture needs at least one source, e.g. Mixture({'shards/web': 0.7, 'shards/code': 0.3})"
            )
        if len(pairs) > 255:
            raise ValueError(f"a Mixture takes at most 255 sources, got {len(pairs)}; merge some folders first")
        self.seed = check_int("seed", seed, min=0)
        self.paths = tuple(_source_path(p) for p, _ in pairs)
        raw = [check_weight(p, w) for p, w in pairs]
        self.given_weights = tuple(raw)
        distinct_sources(list(self.paths))
        q, period = quota_of(list(self.paths), raw)
        self.schedule = QuotaSchedule(tuple(q), period)
        self.weights = tuple(Fraction(qi, period) for qi in q)
        self.tokenizer = common_tokenizer(list(self.paths), remote=self.remote)

    def __len__(self) -> int:
        return len(self.paths)

    def __repr__(self) -> str:
        parts = ", ".join(f"{_shown(p)!r}: {float(w):.6g}" for p, w in zip(self.paths, self.weights))
        return f"Mixture({{{parts}}}, seed={self.seed})"

    def to_dict(self) -> dict[str, Any]:
        """Plain values: the paths, the weights as ``"q/Q"`` strings, and the seed."""
        return {
            "sources": [_shown(p) for p in self.paths],
            "weights": [f"{w.numerator}/{w.denominator}" for w in self.weights],
            "seed": self.seed,
        }

    def window_dataset_class(self) -> type:
        """`MixtureWindows`: what ``SlidingWindowDataset(mixture, ...)`` builds (imported here: it needs torch)."""
        from tokembed.data.mixture_windows import MixtureWindows

        return MixtureWindows

    def spec(self) -> dict[str, Any]:
        """``{"sources": [[absolute path, weight as given], ...], "seed"}``: JSON, for configs and checkpoints."""
        from tokembed.storage.urls import public_url

        where = [public_url(p) if isinstance(p, str) else str(p.resolve()) for p in self.paths]  # no credentials
        return {"sources": [[x, w] for x, w in zip(where, self.given_weights)], "seed": self.seed}

    @classmethod
    def from_spec(cls, spec: Any, **remote: Any) -> Mixture:
        """The mixture `spec` describes (a checkpoint's ``data`` entry); ``remote``: `Mixture`'s storage options."""
        if not isinstance(spec, Mapping) or not isinstance(spec.get("sources"), (list, tuple)) or "seed" not in spec:
            raise ValueError(
                f"{spec!r} does not describe a mixture; expected {{'sources': [[path, weight], ...], 'seed': 0}}"
            )
        return cls([tuple(pair) for pair in spec["sources"]], seed=spec["seed"], **remote)

    # -- what the loader asks of a mixture (a `tokembed.PhasedMixture` answers the same) ----------------

    @property
    def phases(self) -> tuple:
        """One `tokembed.data.phases.Phase`, from token 0, with these weights (a `PhasedMixture` has several)."""
        listed = tuple(enumerate(self.given_weights))
        return (Phase(number=1, name=None, start=0, listed=listed, q=self.schedule.q, period=self.schedule.period),)

    @property
    def epoch_sources(self) -> tuple[int, ...]:
        """The sources whose windows make the loader's nominal epoch: all of them."""
        return tuple(range(len(self.paths)))

    def slot_schedule(self, *, max_length: int) -> QuotaSchedule:
        """Slot -> (source, draw) of the global order: the quota schedule (windows of any length)."""
        return self.schedule

    def state_entries(self, sources: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """What a loader's state records of the mixture beside its data: the weights and the seed."""
        d = self.to_dict()
        return {"weights": d["weights"], "mixture_seed": d["seed"]}
