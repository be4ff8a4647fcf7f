"""Mixtures that change over training: phases of weights, exact at every prefix and across every resume.

A `PhasedMixture` is a list of phases, each a start (in training tokens) and a set of weights as a
`tokembed.Mixture` takes them; a phase holds from its start until the next one's. Sources may enter or
leave at any phase. The decisions, which docs/loading.md repeats for users:

**Sources.** The mixture's sources are every phase's sources, numbered in the order they first appear
(the first phase's in its order, then each later phase's new ones in theirs). A source keeps its number
for the whole run; a phase that does not list it gives it weight 0.

**Phase starts are in training tokens, rounded up to a whole window.** The global order is a sequence
of windows (*slots*); a training step reads ``G`` of them (the global batch) and counts ``L =
max_length`` tokens for each (its inputs), so slot ``p`` holds the run's tokens ``[p L, (p + 1) L)``. A
phase that starts at token ``T`` starts at slot ``P = ceil(T / L)``: the first window whose tokens all
come at or after ``T`` (exactly at ``T`` when ``L`` divides it). It starts at the step boundary ``P / G``
when ``T`` is a multiple of ``G L`` (tokens per step); otherwise step ``P div G`` holds windows of both
phases, each exactly where the schedule puts it. Tokens rather than steps: a phase stays where it was
put when the global batch or the window length changes, and schedules read as papers quote them ("the
last 50B tokens"). Two phases whose starts round to the same slot are an error: the first would hold no
window.

**Within a phase:** the quota schedule of its weights (`tokembed.data.mixture`), started afresh at the
phase's first slot. For every prefix of ``K`` slots of phase ``k`` (counted from its first slot), source
``i`` has ``c_i`` windows with ``|c_i - K w_ki| < 1``: the bound a `Mixture` keeps, in every phase.

**Each source keeps its own position.** Source ``i``'s windows are numbered by *draws* ``j = 0, 1, 2,
...`` over the whole run; draw ``j`` is position ``j mod n_i`` of the source's epoch ``j div n_i``, each
epoch a fresh keyed permutation (as in a `Mixture`). Phase ``k`` continues the draws where the earlier
phases left them: the slot at local position ``u`` of phase ``k`` that its quota table gives to source
``i`` with rank ``r`` (``r`` earlier windows of ``i`` in the phase) is draw ``B_ki + r``, where ``B_ki``
counts source ``i``'s windows in phases ``1 .. k-1`` (a closed formula of each phase's length). So a
source that continues into the next phase neither restarts its epoch nor repeats a window, and a source
that leaves and comes back resumes at the next window of the epoch it was in. Any slot costs O(1)
arithmetic: no index, no history.

**One phase is a Mixture.** A schedule of one phase gives every slot the source and draw that a
`Mixture` of the same sources (in the same order) and weights gives, and the windows are keyed alike
(mixture seed, loader seed, source number, epoch): the same windows in the same order.

**Resume.** A loader's state is a position in the global order (slot ``X``, a whole step). A phase that
had started (its first slot ``< X``) must be the same at resume: its start, its weights, and the data of
its sources (compared by content, so moved folders are fine). Phases that had not started may be added,
changed or removed; `check_resume` says what changed (the loader's ``resume_notes``; `tokembed train`
logs them). A change that would start a phase before ``X`` changes windows already read and is refused,
naming the phase. A phase starting exactly at ``X`` has not started. The loader's nominal epoch
(``len(loader)``) is the windows of the first phase's sources, so a later phase never moves it.

A schedule file (`load_schedule`; ``tokembed train --mixture FILE``, ``tokembed stats --mixture FILE``) is
TOML (``.toml``: `tomllib`, or `tomli` on Python 3.10) or JSON (``.json``), of this shape::

    seed = 0                       # optional
    [sources]                      # optional names; relative paths are relative to this file
    web = "shards/web"
    code = "shards/code"
    math = "shards/math"

    [[phases]]
    start = 0                      # in training tokens
    weights = { web = 0.7, code = 0.3 }

    [[phases]]
    name = "anneal"                # optional: logs and errors name it
    start = 800_000_000
    weights = { web = 0.4, code = 0.3, math = 0.3 }

Without ``[sources]`` the weights' keys are the paths themselves. ``weights = [["web", 0.7], ["code", 0.3]]``
(pairs) reads the same as the table.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tokembed._checks import check_int
from tokembed._paths import local_path
from tokembed.data.mixture import check_weight, common_tokenizer, distinct_sources, quota_of
from tokembed.data.schedule import Phase, PhaseSchedule, first_slot

__all__ = ["PhasedMixture", "check_end", "load_schedule", "mixture_from_spec", "schedule_decides", "spec_paths"]

_MAX_SOURCES = 255  # source numbers are stored as uint8 in the quota tables


# ----------------------------------------------------------------------------------------- the mixture


def _start(value: object, where: str) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # 8e8 in a JSON file
    try:
        return check_int("start", value, min=0, noun="a number of tokens")
    except (TypeError, ValueError) as e:
        raise type(e)(f"{where}: {e}; a phase starts at a training token (0, 800_000_000, ...)") from None


def _phase_entry(entry: object, k: int) -> tuple[int, list[tuple[Any, Any]], str | None]:
    """``(start, [(path, weight), ...], name)`` of one phase as given: a pair, a triple or a mapping."""
    where = f"phase {k + 1}"
    if isinstance(entry, Mapping):
        unknown = sorted(set(entry) - {"start", "weights", "name"})
        if unknown or "start" not in entry or "weights" not in entry:
            raise ValueError(
                f"{where}: expected {{'start': tokens, 'weights': {{path: weight, ...}}, 'name': optional}}, got keys "
                f"{sorted(entry)}"
            )
        start, weights, name = entry["start"], entry["weights"], entry.get("name")
    elif isinstance(entry, (tuple, list)) and len(entry) in (2, 3):
        start, weights, name = entry[0], entry[1], entry[2] if len(entry) == 3 else None
    else:
        raise TypeError(f"{where}: expected (start, {{path: weight, ...}}) or a mapping, got {entry!r}")
    if name is not None and (not isinstance(name, str) or not name):
        raise TypeError(f"{where}: a phase's name must be a non-empty str, got {name!r}")
    where = f"phase {k + 1}{f' {name!r}' if name else ''}"
    pairs = list(weights.items()) if isinstance(weights, Mapping) else [tuple(p) for p in weights]
    if not pairs:
        raise ValueError(f"{where} lists no source; give it {{path: weight, ...}}")
    return _start(start, where), pairs, name


def _check_order(entries: list[tuple[int, list, str | None]]) -> None:
    """Starts from 0, strictly increasing; names used once."""
    label = lambda k: f"phase {k + 1}{f' {entries[k][2]!r}' if entries[k][2] else ''}"  # noqa: E731
    if entries[0][0] != 0:
        raise ValueError(
            f"{label(0)} starts at token {entries[0][0]:,}; the first phase starts at token 0 (the run's first window)"
        )
    for k in range(1, len(entries)):
        a, b = entries[k - 1][0], entries[k][0]
        if b == a:
            raise ValueError(
                f"{label(k - 1)} and {label(k)} both start at token {a:,}: phases do not overlap, each one "
                "runs until the next starts; give each its own start"
            )
        if b < a:
            raise ValueError(
                f"{label(k)} starts at token {b:,}, before {label(k - 1)} (token {a:,}): phases are listed in the "
                "order they start"
            )
    names = [e[2] for e in entries if e[2]]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"the phase name {twice[0]!r} is used twice; give each phase its own name")


def _check_exists(path: Path, where: str) -> None:
    from tokembed.shards import megatron

    if not (path.is_dir() or megatron.is_megatron_prefix(path)):
        raise FileNotFoundError(
            f"{where}: source {path} does not exist (no shard folder, no Megatron .bin/.idx prefix); check the "
            "path, or prepare it with `tokembed prepare`"
        )


class PhasedMixture:
    """A mixture whose weights change over training: phases, each exact, each source keeping its place.

    ``PhasedMixture([(0, {"shards/web": 0.7, "shards/code": 0.3}), (800_000_000, {"shards/web": 0.4,
    "shards/code": 0.3, "shards/math": 0.3})], seed=0)`` is accepted wherever a `Mixture` is
    (`SlidingWindowDataset`, `create_dataloader`, `train`, `stats`). Phase starts are training tokens; within
    each phase every prefix holds each source's share to within one window; a source continues its own
    order across phases (see the module's notes). A schedule of one phase is the `Mixture` of its weights.

    Args:
        phases: ``(start, weights)`` or ``(start, weights, name)`` pairs, or mappings ``{"start", "weights",
            "name"}``, in the order they start; the first starts at 0. ``weights`` are as a `Mixture` takes
            them: ``{path: weight}`` or ``(path, weight)`` pairs of shard folders or Megatron prefixes.
        seed: selects each source's orders (with the loader's seed), int >= 0.

    Attributes:
        phases: the `Phase` s, in order.
        paths: every phase's sources, in the order they first appear (source ``i``).
        seed: the mixture seed.
        tokenizer: the sources' `TokenizerIdentity` (None when none records one).
        epoch_sources: the sources of the first phase (their windows make the loader's nominal epoch).

    Raises:
        ValueError: no phase; a phase without sources, a weight that is negative, NaN or infinite, weights
            that sum to 0 or too small to schedule, a source listed twice in a phase; phases out of order,
            starting together, or a first phase that does not start at 0; more than 255 sources; sources
            tokenized differently. Each names the phase and the value.
        FileNotFoundError: a source that does not exist (names the phase).
    """

    def __init__(self, phases: Sequence[Any], *, seed: int = 0) -> None:
        self.seed = check_int("seed", seed, min=0)
        if isinstance(phases, (str, bytes, Mapping)) or not isinstance(phases, Sequence):
            raise TypeError(
                f"phases must be a list of (start, weights) pairs, got {type(phases).__name__}; "
                "e.g. PhasedMixture([(0, {'shards/web': 0.7, 'shards/code': 0.3}), (800_000_000, {...})])"
            )
        if not phases:
            raise ValueError("a PhasedMixture needs at least one phase, e.g. [(0, {'shards/web': 1.0})]")
        entries = [_phase_entry(p, k) for k, p in enumerate(phases)]
        _check_order(entries)
        numbered: dict[Path, int] = {}  # resolved path -> source number
        paths: list[Path] = []
        first_phase: list[str] = []
        built = []
        for k, (start, pairs, name) in enumerate(entries):
            where = Phase(k + 1, name, start, (), (), 1).label
            listed = self._number(pairs, where, numbered, paths, first_phase)
            built.append((k + 1, name, start, listed, where))
        if len(paths) > _MAX_SOURCES:
            raise ValueError(f"a PhasedMixture takes at most {_MAX_SOURCES} sources, got {len(paths)}")
        self.paths = tuple(paths)
        from tokembed.storage.options import remote_options

        self.remote = remote_options()  # the loader asks every mixture; a phased one's sources are local paths
        self.phases = tuple(
            self._phase(number, name, start, listed, where) for number, name, start, listed, where in built
        )
        self.tokenizer = common_tokenizer(list(self.paths), labels=first_phase)
        self.epoch_sources = tuple(i for i, _ in self.phases[0].listed)
        self._schedules: dict[int, PhaseSchedule] = {}

    @staticmethod
    def _number(pairs, where: str, numbered: dict, paths: list, first_phase: list) -> tuple[tuple[int, float], ...]:
        """The phase's ``(source number, weight)`` pairs; new sources get the next numbers."""
        given = [local_path(os.fspath(p), what=f"{where}: the mixture source") for p, _ in pairs]
        try:
            distinct_sources(given)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
        listed = []
        for p, (_, w) in zip(given, pairs):
            weight = check_weight(p, w, where=where)
            key = p.resolve()
            if key not in numbered:
                _check_exists(p, where)
                numbered[key] = len(paths)
                paths.append(p)
                first_phase.append(where.split(" (")[0])
            listed.append((numbered[key], weight))
        return tuple(listed)

    def _phase(self, number: int, name: str | None, start: int, listed, where: str) -> Phase:
        raw = [0.0] * len(self.paths)
        for i, w in listed:
            raw[i] = w
        q, period = quota_of(list(self.paths), raw, where=where)
        return Phase(number, name, start, listed, tuple(q), period)

    def __len__(self) -> int:
        return len(self.paths)

    def __repr__(self) -> str:
        parts = []
        for ph in self.phases:
            weights = ", ".join(f"{str(self.paths[i])!r}: {float(ph.weights[i]):.6g}" for i, _ in ph.listed)
            parts.append(f"({ph.start}, {{{weights}}}{f', {ph.name!r}' if ph.name else ''})")
        return f"PhasedMixture([{', '.join(parts)}], seed={self.seed})"

    # -- what the loader asks of a mixture (as of a `Mixture`) ---------------------------------------------

    def window_dataset_class(self) -> type:
        """`MixtureWindows`: what ``SlidingWindowDataset(mixture, ...)`` builds (imported here: it needs torch)."""
        from tokembed.data.mixture_windows import MixtureWindows

        return MixtureWindows

    def first_slots(self, *, max_length: int) -> tuple[int, ...]:
        """The slot each phase starts at for windows of ``max_length`` tokens (see the module's notes).

        Raises:
            ValueError: two phases start in the same window (the first would hold none).
        """
        max_length = check_int("max_length", max_length, min=1)
        slots = tuple(first_slot(ph.start, max_length) for ph in self.phases)
        for a, b, pa, pb in zip(slots, slots[1:], self.phases, self.phases[1:]):
            if a == b:
                raise ValueError(
                    f"{pa.label} ends at token {pb.start:,}, before its first whole window of max_length={max_length} "
                    f"tokens (phases start at the first window at or after their start: both start at window {a:,}); "
                    f"start {pb.label.split(' (')[0]} at token {(a + 1) * max_length:,} or later, or leave {pa.label.split(' (')[0]} out"
                )
        return slots

    def slot_schedule(self, *, max_length: int) -> PhaseSchedule:
        """Slot -> (source, draw) of the global order, for windows of ``max_length`` tokens."""
        schedule = self._schedules.get(max_length)
        if schedule is None:
            schedule = self._schedules[max_length] = PhaseSchedule(self.phases, self.first_slots(max_length=max_length))
        return schedule

    def phase_at(self, token: int) -> Phase:
        """The phase in effect at training token ``token`` (the one with the last start at or before it)."""
        starts = [ph.start for ph in self.phases]
        return self.phases[max(0, int(np.searchsorted(starts, token, side="right")) - 1)]

    def state_entries(self, sources: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """What a loader's state records of the mixture: its seed, its phases and each source's data."""
        return {"mixture_seed": self.seed, "phases": [ph.record() for ph in self.phases], "sources": sources or []}

    # -- records ------------------------------------------------------------------------------------------

    def spec(self) -> dict[str, Any]:
        """``{"phases": [{"start", "sources": [[absolute path, weight as given], ...], "name"?}, ...], "seed"}``:
        JSON, for configs and checkpoints."""
        phases = []
        for ph in self.phases:
            entry: dict[str, Any] = {
                "start": ph.start,
                "sources": [[str(self.paths[i].resolve()), w] for i, w in ph.listed],
            }
            if ph.name:
                entry["name"] = ph.name
            phases.append(entry)
        return {"phases": phases, "seed": self.seed}

    @classmethod
    def from_spec(cls, spec: Any) -> PhasedMixture:
        """The phased mixture `spec` describes (a checkpoint's ``data`` entry)."""
        if not isinstance(spec, Mapping) or not isinstance(spec.get("phases"), (list, tuple)) or "seed" not in spec:
            raise ValueError(
                f"{spec!r} does not describe a phased mixture; expected {{'phases': [{{'start': 0, 'sources': "
                "[[path, weight], ...]}, ...], 'seed': 0}"
            )
        phases = []
        for k, ph in enumerate(spec["phases"]):
            if not isinstance(ph, Mapping) or "sources" not in ph or "start" not in ph:
                raise ValueError(f"phase {k + 1} of {spec!r} has no start or sources")
            phases.append((ph["start"], [tuple(p) for p in ph["sources"]], ph.get("name")))
        return cls(phases, seed=spec["seed"])

    def to_dict(self) -> dict[str, Any]:
        """Plain values: the sources, each phase's record (`Phase.record`), and the seed."""
        return {
            "sources": [str(p) for p in self.paths],
            "phases": [ph.record() for ph in self.phases],
            "seed": self.seed,
        }


def check_end(
    phases: Sequence[Phase],
    *,
    windows: int,
    max_length: int,
    what: str,
    fix: str = "start it earlier, train longer, or leave it out (a resumed run can add it later)",
) -> None:
    """Refuse a phase (but the first) that starts at or after window ``windows`` of the global order, the end of
    a run of ``what``: it would never be read."""
    for ph in phases[1:]:
        slot = first_slot(ph.start, max_length)
        if slot >= windows:
            raise ValueError(
                f"{ph.label} starts at window {slot:,}, at or after the end of training at window {windows:,} "
                f"(token {windows * max_length:,}: {what}); {fix}"
            )


def schedule_decides(saved_spec: Any, spec: Any) -> bool:
    """Whether two data specs are mixtures of which one has phases: then resuming one with the other is decided
    at the saved position (`check_resume`, when the loader loads its state), not by comparing the specs."""
    return (
        isinstance(saved_spec, Mapping)
        and isinstance(spec, Mapping)
        and ("phases" in saved_spec or "phases" in spec)
        and saved_spec.get("seed") == spec.get("seed")
    )


def spec_paths(spec: Mapping[str, Any]) -> list[str]:
    """The source paths of a `Mixture`'s or `PhasedMixture`'s spec, each once, in source-number order (a phased
    spec: by first appearance), without opening them (they may have moved)."""
    lists = [ph["sources"] for ph in spec["phases"]] if "phases" in spec else [spec["sources"]]
    return list(dict.fromkeys(str(p) for pairs in lists for p, _ in pairs))


def mixture_from_spec(spec: Any) -> Any:
    """The `Mixture` or `PhasedMixture` a spec (`Mixture.spec`, `PhasedMixture.spec`) describes."""
    from tokembed.data.mixture import Mixture

    if isinstance(spec, Mapping) and "phases" in spec:
        return PhasedMixture.from_spec(spec)
    return Mixture.from_spec(spec)


# ----------------------------------------------------------------------------------------- schedule files


def _read_file(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise FileNotFoundError(
            f"the schedule file {path} does not exist; give a .toml or .json file (docs/loading.md)"
        )
    suffix = path.suffix.lower()
    try:
        if suffix == ".json":
            import json

            data = json.loads(path.read_text(encoding="utf-8"))
        elif suffix == ".toml":
            if sys.version_info >= (3, 11):
                import tomllib
            else:  # pragma: no cover - Python 3.10 (tomli is a dependency there)
                import tomli as tomllib
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        else:
            raise ValueError(
                f"the schedule file {path} is neither .toml nor .json; name it schedule.toml or schedule.json"
            )
    except (ValueError, UnicodeDecodeError) as e:  # json.JSONDecodeError and tomllib.TOMLDecodeError are ValueErrors
        if "neither .toml nor .json" in str(e):
            raise
        raise ValueError(f"the schedule file {path} is not valid {suffix[1:].upper()}: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"the schedule file {path} must hold a table with 'phases', got {type(data).__name__}")
    return data


def _source_names(data: dict[str, Any], path: Path) -> dict[str, Path] | None:
    names = data.get("sources")
    if names is None:
        return None
    if not isinstance(names, dict) or not all(isinstance(v, str) for v in names.values()):
        raise ValueError(f'{path}: [sources] must map names to paths (web = "shards/web"), got {names!r}')
    return {k: path.parent / v for k, v in names.items()}


def load_schedule(path: str | os.PathLike) -> PhasedMixture:
    """The `PhasedMixture` a TOML or JSON schedule file describes (see the module's notes for the format).

    Relative source paths are relative to the file's folder. Unknown keys are errors, so a typo never
    silently drops a phase or a weight.
    """
    path = Path(path)
    data = _read_file(path)
    unknown = sorted(set(data) - {"seed", "sources", "phases"})
    if unknown:
        raise ValueError(
            f"{path}: unknown key {unknown[0]!r}; a schedule has 'phases' (required), 'sources' and 'seed'"
        )
    if not isinstance(data.get("phases"), list) or not data["phases"]:
        raise ValueError(f"{path} lists no phases; give [[phases]] tables with start and weights")
    names = _source_names(data, path)
    phases = []
    for k, ph in enumerate(data["phases"]):
        if not isinstance(ph, dict):
            raise ValueError(f"{path}: phase {k + 1} must be a table with start and weights, got {ph!r}")
        weights = ph.get("weights")
        if isinstance(weights, (dict, list)):  # pairs, not a dict by path: one folder named twice is refused
            pairs = weights.items() if isinstance(weights, dict) else [_pair(p, path, k + 1) for p in weights]
            weights = [(_source_path(key, names, path, k + 1), w) for key, w in pairs]  # as a table's, [[p, w]]
        phases.append({**ph, "weights": weights} if "weights" in ph else ph)
    return PhasedMixture(phases, seed=data.get("seed", 0))


def _pair(entry: object, path: Path, number: int) -> tuple[str, Any]:
    """One ``[path or name, weight]`` of a phase's weights given as a list."""
    if not isinstance(entry, list) or len(entry) != 2 or not isinstance(entry[0], str):
        raise ValueError(
            f"{path}: phase {number} weighs {entry!r}; give its weights as a table {{ web = 0.7, code = 0.3 }} or "
            'as [path, weight] pairs [["web", 0.7], ["code", 0.3]]'
        )
    return entry[0], entry[1]


def _source_path(key: str, names: dict[str, Path] | None, path: Path, number: int) -> Path:
    if names is None:
        return path.parent / key
    if key not in names:
        raise ValueError(
            f"{path}: phase {number} weighs source {key!r}, which [sources] does not name; named: {', '.join(names)}"
        )
    return names[key]
