"""Phased mixtures: weights that change over training, exact in every phase, each source keeping its place,
resumable anywhere (in-process here; torchrun at 2 -> 3 ranks in tests/test_distributed.py).

The schedule is checked against a reference written from the definition (each phase's first window is the first
at or after its start token; within a phase, earliest deadline first over each window's release and deadline;
a source's draw counts its windows in all earlier slots). Windows are identified by their tokens: source ``i``'s
tokens count up from ``i * BASE`` (tests/test_mixture.py's folders).
"""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tokembed
from handmade_shards import write_shards
from test_mixture import BASE, L, ident, windows_read, write_source
from tokembed.data.schedule import Phase, PhaseSchedule, first_slot, quota_period


def make_sources(root: Path, sizes: list[int]) -> list[Path]:
    """Source ``i``: ``sizes[i]`` windows of L tokens (one document of sizes[i] * L tokens and its separator)."""
    paths = []
    for i, n in enumerate(sizes):
        write_source(root / f"s{i}", i, [[n * L]])
        paths.append(root / f"s{i}")
    return paths


@pytest.fixture
def four(tmp_path) -> list[Path]:
    """Four sources of 40, 1, 7 and 25 windows (a tiny one included)."""
    return make_sources(tmp_path, [40, 1, 7, 25])


# ----------------------------------------------------------------------------------- the reference


def reference_order(phases: list[tuple[int, list[Fraction]]], max_length: int, n: int) -> list[tuple[int, int]]:
    """``(source, draw)`` of slots ``0 .. n-1``, from the definition, one slot at a time (no tables, no periods).

    Phase ``k`` starts at the first window at or after its start token (``ceil(T / L)``). In a phase, slot ``K``
    (counted from 1 in the phase) goes, among the sources whose next window ``m`` is released (``floor((m-1)/w)
    + 1 <= K``), to the one with the earliest deadline ``ceil(m / w)``, ties to the lower source number. A
    source's draw is the number of its windows in all earlier slots.
    """
    firsts = [math.ceil(Fraction(start, max_length)) for start, _ in phases]
    total = [0] * len(phases[0][1])
    out = []
    for p in range(n):
        k = max(i for i, f in enumerate(firsts) if f <= p)
        if p == firsts[k]:
            local = [0] * len(total)
        w = phases[k][1]
        slot = p - firsts[k] + 1
        best = min(
            (math.ceil((local[i] + 1) / w[i]), i)
            for i in range(len(w))
            if w[i] > 0 and math.floor(local[i] / w[i]) + 1 <= slot
        )[1]
        out.append((best, total[best]))
        total[best] += 1
        local[best] += 1
    return out


@st.composite
def schedules(draw):
    """2-5 phases over 2-5 sources: random weights (zeros included: sources leave and come back), window
    lengths, and starts that fall anywhere inside a window."""
    n_sources, n_phases = draw(st.integers(2, 5)), draw(st.integers(2, 5))
    max_length = draw(st.integers(1, 64))
    weight = st.one_of(st.just(0), st.integers(1, 12), st.sampled_from([0.05, 0.1, 0.25, 0.3, 0.7, 2.5]))
    phases, slot = [], 0
    for k in range(n_phases):
        w = draw(st.lists(weight, min_size=n_sources, max_size=n_sources))
        if not any(w):
            w[draw(st.integers(0, n_sources - 1))] = 1
        start = 0 if k == 0 else draw(st.integers((slot - 1) * max_length + 1, slot * max_length))  # ceil(/L) = slot
        phases.append((start, w))
        slot += draw(st.integers(1, 300))
    return phases, max_length, slot + draw(st.integers(0, 300))


def phase_schedule(phases, max_length: int) -> PhaseSchedule:
    built = []
    for k, (start, w) in enumerate(phases):
        q, period = quota_period([float(x) for x in w])
        listed = tuple((i, float(x)) for i, x in enumerate(w) if x)
        built.append(Phase(number=k + 1, name=None, start=start, listed=listed, q=tuple(q), period=period))
    return PhaseSchedule(built, [first_slot(start, max_length) for start, _ in phases])  # the code's rounding


@settings(max_examples=40, deadline=None)
@given(case=schedules(), order=st.randoms(use_true_random=False))
def test_random_schedules_match_the_counting_reference_at_every_prefix(case, order):
    phases, max_length, n = case
    weights = [[Fraction(str(x)) / sum(Fraction(str(y)) for y in w) for x in w] for _, w in phases]
    expected = reference_order([(s, w) for (s, _), w in zip(phases, weights)], max_length, n)
    schedule = phase_schedule(phases, max_length)
    source, draw = schedule.draws(np.arange(n))
    assert list(zip(source.tolist(), draw.tolist())) == expected
    shuffled = list(range(n))  # any slots in any order (a loader block, a rank's part, a cache's look-ahead)
    order.shuffle(shuffled)
    s2, d2 = schedule.draws(np.asarray(shuffled))
    assert [expected[p] for p in shuffled] == list(zip(s2.tolist(), d2.tolist()))
    for _ in range(5):  # blocks, most of them inside one phase
        a = order.randrange(n)
        b = min(n, a + order.choice([1, 6, 64]))
        s3, d3 = schedule.draws(np.arange(a, b))
        assert list(zip(s3.tolist(), d3.tolist())) == expected[a:b]
    onehot = np.zeros((n + 1, len(weights[0])), np.int64)
    onehot[np.arange(1, n + 1), [s for s, _ in expected]] = 1
    prefix = np.cumsum(onehot, axis=0)  # (n+1, S): windows of each source in the first k slots
    assert all(np.array_equal(schedule.counts(k), prefix[k]) for k in range(n + 1))
    firsts = [math.ceil(Fraction(s, max_length)) for s, _ in phases]
    for k, (lo, hi) in enumerate(zip(firsts, [*firsts[1:], n])):  # every prefix of every phase
        c = prefix[lo + 1 : hi + 1] - prefix[lo]  # (K, S)
        share = np.asarray(weights[k], dtype=object) * np.arange(1, hi - lo + 1)[:, None]
        assert np.all(np.abs(c - share) < 1), f"phase {k + 1} leaves its share by a window or more"
    for p, (s, j) in enumerate(expected):  # a source's draws go on across phases: 0, 1, 2, ... in slot order
        assert schedule.slot_of_draw(s, j) == p
    for s in range(len(weights[0])):
        assert [j for t, j in expected if t == s] == list(range(int(prefix[n][s])))


def test_a_phase_starts_at_the_first_window_at_or_after_its_token(four):
    a, b = four[0], four[3]
    for start, first in ((8 * L, 8), (8 * L + 1, 9), (9 * L - 1, 9), (1, 1)):
        m = tokembed.PhasedMixture([(0, {a: 1}), (start, {b: 1})])
        ds = tokembed.SlidingWindowDataset(m, max_length=L)
        source, _ = ds.sources_of(ds.codes(np.arange(20)))
        assert source.tolist() == [0] * first + [1] * (20 - first)
        assert ds.first_slots == (0, first)


# ----------------------------------------------------------------------------------- one phase = Mixture


def test_one_phase_reads_todays_mixture_batch_for_batch(four, tmp_path):
    weights = {four[0]: 0.5, four[1]: 0.2, four[2]: 0.3}
    mixture = tokembed.Mixture(weights, seed=3)
    phased = tokembed.PhasedMixture([(0, weights)], seed=3)
    (tmp_path / "one.toml").write_text(
        "seed = 3\n[[phases]]\nstart = 0\nweights = { "
        + ", ".join(f'"{p.name}" = {w}' for p, w in weights.items())
        + " }\n"
    )
    filed = tokembed.load_schedule(tmp_path / "one.toml")
    for kw in (dict(batch_size=4), dict(batch_size=3, shuffle=False), dict(batch_size=5, seed=9, stride=3)):
        kw = dict(max_length=L, **kw)
        old = tokembed.create_dataloader(mixture, **kw)
        expected = windows_read(old) + windows_read(old)  # two nominal epochs: the order goes on
        for other in (phased, filed):
            new = tokembed.create_dataloader(other, **kw)
            assert len(new) == len(old)
            assert windows_read(new) + windows_read(new) == expected


# ----------------------------------------------------------------------------------- sources keep their place


def own_order(path_list: list[Path], source: int, n: int, seed: int) -> list[tuple[int, int]]:
    """The first ``n`` windows of source ``source`` in its own order: a Mixture that reads only it (weight 0 for
    the others keeps its number, which keys its order)."""
    m = tokembed.Mixture({p: float(i == source) for i, p in enumerate(path_list)}, seed=seed)
    ds = tokembed.SlidingWindowDataset(m, max_length=L)
    x, _ = ds._gather(ds.codes(np.arange(n)))  # every slot is the source's next draw
    return [ident(r) for r in x]


def take(loader, n: int) -> list[list[tuple[int, int]]]:
    """The next ``n`` batches of ``loader``, epoch after epoch (an epoch may have none left after a resume)."""
    out: list[list[tuple[int, int]]] = []
    while len(out) < n:
        for x, _ in loader:
            out.append([ident(r) for r in x])
            if len(out) == n:
                break
    return out


def test_sources_continue_their_own_order_across_phases_and_after_a_pause(four):
    a, tiny, c, d = four
    # c leaves in phase 2 and comes back in phase 3; d arrives in phase 2; the tiny source restarts often.
    phases = [(0, {a: 0.5, c: 0.3, tiny: 0.2}), (20 * L + 3, {a: 0.5, d: 0.3, tiny: 0.2}), (70 * L, {c: 0.6, d: 0.4})]
    m = tokembed.PhasedMixture(phases, seed=5)
    assert [str(p) for p in m.paths] == [str(a), str(c), str(tiny), str(d)]  # numbered as they first appear
    loader = tokembed.create_dataloader(m, batch_size=4, max_length=L, seed=0)
    read = [w for _ in range(4) for b in windows_read(loader) for w in b]
    for number, path in enumerate(m.paths):
        mine = [w for w in read if w[0] == int(path.name[1:])]
        assert mine == own_order(list(m.paths), number, len(mine), 5)  # no restart, no repeat, no skip
    c_in_phase_3 = [i for i, w in enumerate(read) if w[0] == 2 and i >= 70]
    assert c_in_phase_3 and not [i for i, w in enumerate(read) if w[0] == 2 and 21 <= i < 70]  # it paused


def test_workers_read_the_same_phased_batches(four):
    m = phased(four)
    one = tokembed.create_dataloader(m, batch_size=6, max_length=L)
    two = tokembed.create_dataloader(m, batch_size=6, max_length=L, num_workers=2)
    assert take(two, 20) == take(one, 20)  # the schedule crosses to the workers with the dataset


# ----------------------------------------------------------------------------------- resume


def global_batches(m, world: int, *, g: int = 6, cut: int | None = None, state=None, steps: int = 40) -> list:
    """The global batches of ``world`` ranks (each step's windows, rank after rank): ``steps`` of them, or the
    ones after loading ``state``; with ``cut``, also rank 1's state after ``cut`` steps."""
    loaders = [
        tokembed.create_dataloader(m, global_batch_size=g, max_length=L, rank=r, world_size=world) for r in range(world)
    ]
    if state is not None:
        for x in loaders:
            x.load_state_dict(state)
    out, its = [], [iter(x) for x in loaders]
    saved = None
    while len(out) < steps:
        if cut is not None and len(out) == cut:
            saved = json.loads(json.dumps(loaders[-1].state_dict()))
        parts = [next(it, None) for it in its]  # every rank's epoch ends at the same step (each then moves on)
        if parts[0] is None:
            its = [iter(x) for x in loaders]
            continue
        out.append([ident(r) for x, _ in parts for r in x])
    return (out, saved, loaders) if cut is not None else out


# 6 windows a step: phase 2 starts at window 24 (the start of step 4), phase 3 at window 63 (3 windows into step 10)
PHASES = [(0, {0: 0.5, 2: 0.3, 1: 0.2}), (24 * L, {0: 0.3, 3: 0.5, 1: 0.2}), (62 * L + 1, {2: 0.5, 3: 0.5})]


def phased(paths: list[Path], phases=PHASES, seed: int = 1) -> tokembed.PhasedMixture:
    return tokembed.PhasedMixture([(s, {paths[i]: w for i, w in ws.items()}) for s, ws in phases], seed=seed)


@pytest.mark.parametrize("cut", [0, 3, 4, 5, 9, 10, 11, 17])  # boundary steps: 4 (exact), 10 (mid-step), after
@pytest.mark.parametrize("after", [1, 3])
def test_resume_anywhere_reads_what_the_uninterrupted_run_reads(four, cut, after):
    m = phased(four)
    reference = global_batches(m, 1, steps=30)
    _, state, _ = global_batches(m, 2, cut=cut, steps=cut + 1)
    assert global_batches(m, after, state=state, steps=30 - cut) == reference[cut:]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(0, 40), before=st.integers(1, 3), after=st.integers(1, 3), seed=st.integers(0, 2**20))
def test_resume_at_random_points_and_rank_counts(four, cut, before, after, seed):
    m = phased(four, seed=seed)
    reference = global_batches(m, 1, steps=cut + 8)
    _, state, _ = global_batches(m, before, cut=cut, steps=cut + 1)
    assert global_batches(m, after, state=state, steps=8) == reference[cut : cut + 8]


def test_a_future_phase_may_change_and_is_reported(four):
    m = phased(four)
    _, state, _ = global_batches(m, 2, cut=5, steps=6)  # at window 30: phase 2 has started, phase 3 has not
    later = [PHASES[0], PHASES[1], (80 * L, {2: 0.2, 3: 0.8}), (90 * L, {1: 1.0})]
    grown = phased(four, later)
    loader = tokembed.create_dataloader(grown, global_batch_size=6, max_length=L, rank=0, world_size=1)
    loader.load_state_dict(state)
    assert loader.resume_notes == [
        f"the schedule changes phase 3 (from token {62 * L + 1:,}): start {62 * L + 1:,} -> {80 * L:,} tokens; "
        f"weights [{four[2]}: 1/2, {four[3]}: 1/2] -> [{four[2]}: 1/5, {four[3]}: 4/5]",
        f"the schedule adds phase 4 (from token {90 * L:,}): weights [{four[1]}: 1/1]",
    ]
    assert take(loader, 20) == global_batches(grown, 1, steps=25)[5:]  # the new schedule's run from there


def test_a_plain_mixture_run_is_extended_with_an_anneal_phase(four):
    weights = {four[0]: 0.7, four[2]: 0.3}
    old = tokembed.Mixture(weights, seed=2)
    _, state, _ = global_batches(old, 2, cut=7, steps=8)
    extended = tokembed.PhasedMixture([(0, weights), (60 * L, {four[3]: 1.0}, "anneal")], seed=2)
    loader = tokembed.create_dataloader(extended, global_batch_size=6, max_length=L, rank=0, world_size=1)
    loader.load_state_dict(state)
    assert loader.resume_notes == [
        f"the schedule adds phase 2 'anneal' (from token {60 * L:,}): weights [{four[3]}: 1/1]"
    ]
    assert take(loader, 3) == global_batches(old, 1, steps=10)[7:10]


@pytest.mark.parametrize(
    "cut, phases, message",
    [
        (
            5,
            [PHASES[0], (24 * L, {0: 0.5, 3: 0.3, 1: 0.2}), PHASES[2]],
            r"phase 2 \(from token 192\) had started at "
            r"the state's position, token 240 \(window 30\), so it cannot change \(weights \[.*s0: 3/10, .*s1: 1/5, "
            r".*s3: 1/2\] -> \[.*s0: 1/2, .*s1: 1/5, .*s3: 3/10\]\); change only phases that start after token 240",
        ),
        (
            5,
            [PHASES[0], (23 * L, PHASES[1][1]), PHASES[2]],
            r"phase 2 \(from token 192\) had started .* \(start 192 -> 184 tokens\)",
        ),
        (5, [PHASES[0], (30 * L, PHASES[1][1]), PHASES[2]], r"start 192 -> 240 tokens"),
        (5, [PHASES[0]], r"phase 2 \(from token 192\) had started .* \(it is gone\)"),
        (
            5,
            [PHASES[0], PHASES[1], (29 * L, {2: 1.0})],
            r"phase 3 \(from token 232\) would start before the state's "
            r"position, token 240 \(window 30\): windows already read would change; start it at token 240 or later",
        ),
    ],
)
def test_changing_a_started_phase_is_refused_naming_it(four, cut, phases, message):
    _, state, _ = global_batches(phased(four), 2, cut=cut, steps=cut + 1)
    loader = tokembed.create_dataloader(phased(four, phases), global_batch_size=6, max_length=L, rank=0, world_size=1)
    with pytest.raises(ValueError, match=message):
        loader.load_state_dict(state)


def test_a_phase_starting_exactly_at_the_resume_point_may_change(four):
    _, state, _ = global_batches(phased(four), 1, cut=4, steps=5)  # step 4 = window 24: where phase 2 starts
    changed = [PHASES[0], (24 * L, {3: 1.0}), PHASES[2]]
    loader = tokembed.create_dataloader(phased(four, changed), global_batch_size=6, max_length=L)
    loader.load_state_dict(state)
    assert loader.resume_notes == [
        f"the schedule changes phase 2 (from token 192): weights [{four[0]}: 3/10, {four[1]}: 1/5, {four[3]}: 1/2] "
        f"-> [{four[3]}: 1/1]"
    ]
    assert all(w[0] == 3 for batch in take(loader, 6) for w in batch)


def test_a_source_read_so_far_with_other_data_is_refused(four, tmp_path):
    _, state, _ = global_batches(phased(four), 1, cut=5, steps=6)
    other = make_sources(tmp_path / "other", [40, 1, 7, 25])
    write_source(other[2], 2, [[7 * L + 5]])  # source 2 (read in phase 1) now holds other tokens
    loader = tokembed.create_dataloader(phased(other), global_batch_size=6, max_length=L)
    with pytest.raises(ValueError, match=r"another dataset: source 1 \(.*s2\), read before the state was saved"):
        loader.load_state_dict(state)
    write_source(other[2], 2, [[7 * L]])
    loader = tokembed.create_dataloader(phased(other), global_batch_size=6, max_length=L)
    loader.load_state_dict(state)  # the same data at another path: fine


# ----------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "phases, error, message",
    [
        ([], ValueError, r"at least one phase"),
        ({0: {}}, TypeError, r"phases must be a list of \(start, weights\) pairs, got dict"),
        (
            [(0, {0: -0.5, 1: 1})],
            ValueError,
            r"phase 1 \(from token 0\): the weight of source .*s0 must be a finite number >= 0, got -0.5",
        ),
        (
            [(0, {0: 1}), (100, {0: float("nan")}, "anneal")],
            ValueError,
            r"phase 2 'anneal' \(from token 100\): the weight of source .*s0 must be .* got nan",
        ),
        ([(0, {0: 1}), (100, {1: float("inf")})], ValueError, r"phase 2 \(from token 100\): .* got inf"),
        (
            [(0, {0: 1}), (100, {0: 0, 1: 0.0})],
            ValueError,
            r"phase 2 \(from token 100\): the weights \[0.0, 0.0\] sum to 0",
        ),
        (
            [(0, {0: 1}), (100, {0: "a lot"})],
            TypeError,
            r"phase 2 \(from token 100\): the weight of source .*s0 must be a number, got 'a lot'",
        ),
        ([(5, {0: 1})], ValueError, r"phase 1 starts at token 5; the first phase starts at token 0"),
        (
            [(0, {0: 1}), (100, {1: 1}), (50, {0: 1})],
            ValueError,
            r"phase 3 starts at token 50, before phase 2 \(token 100\)",
        ),
        (
            [(0, {0: 1}), (100, {1: 1}, "x"), (100, {0: 1}, "y")],
            ValueError,
            r"phase 2 'x' and phase 3 'y' both start at token 100",
        ),
        ([(0, {0: 1}), (-8, {1: 1})], ValueError, r"phase 2: start must be a number of tokens >= 0, got -8"),
        ([(0, {0: 1}), (1.5, {1: 1})], TypeError, r"phase 2: start must be an integer >= 0, got 1.5"),
        ([(0, {0: 1}), (10, {})], ValueError, r"phase 2 lists no source"),
        ([(0, {0: 1}, "a"), (10, {1: 1}, "a")], ValueError, r"the phase name 'a' is used twice"),
        (
            [(0, {0: 1, 1: 1e-7})],
            ValueError,
            r"phase 1 \(from token 0\): the weight of .*s1 is under 1/131072 of the total",
        ),
    ],
)
def test_bad_schedules_name_the_phase_and_the_value(four, phases, error, message):
    if isinstance(phases, list):
        phases = [(p[0], {four[i]: w for i, w in p[1].items()}, *p[2:]) for p in phases]
    with pytest.raises(error, match=message):
        tokembed.PhasedMixture(phases)


def test_bad_sources_name_the_phase(four, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"phase 2 'code' \(from token 64\): source .*nowhere does not exist"):
        tokembed.PhasedMixture([(0, {four[0]: 1}), (64, {tmp_path / "nowhere": 1}, "code")])
    with pytest.raises(ValueError, match=r"phase 1 \(from token 0\): source .*s0 is listed twice"):
        tokembed.PhasedMixture([(0, [(four[0], 1), (str(four[0]) + "/", 1)])])
    manifest = json.loads((four[3] / "manifest.json").read_text())
    manifest["tokenizer"] = {"name": "cl100k_base", "n_vocab": 100277, "eot_token": 100257, "hash": "ab" * 32}
    (four[3] / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(
        ValueError, match=r"sources .*s0 \(phase 1\) and .*s3 \(phase 2 'math'\) were tokenized differently"
    ):
        tokembed.PhasedMixture([(0, {four[0]: 1}), (64, {four[3]: 1}, "math")])


def test_phases_shorter_than_a_window_and_past_the_end_of_training(four, tmp_path):
    m = tokembed.PhasedMixture([(0, {four[0]: 1}), (1, {four[2]: 1}, "short"), (8, {four[3]: 1})])
    with pytest.raises(
        ValueError,
        match=r"phase 2 'short' \(from token 1\) ends at token 8, before its first whole "
        r"window of max_length=8 tokens .* start phase 3 at token 16 or later, or leave phase 2 'short' out",
    ):
        tokembed.SlidingWindowDataset(m, max_length=8)
    assert tokembed.SlidingWindowDataset(m, max_length=1).first_slots == (0, 1, 8)
    late = tokembed.PhasedMixture([(0, {four[0]: 1}), (10_000, {four[2]: 1}, "anneal")])
    config = tokembed.TrainConfig(data=late, out=str(tmp_path / "run"), max_length=L, batch_size=4, max_steps=5)
    model = tokembed.GPTConfig(context_length=L, dim=16, n_layers=1, n_heads=2)
    with pytest.raises(
        ValueError,
        match=r"phase 2 'anneal' \(from token 10,000\) starts at window 1,250, at or after "
        r"the end of training at window 20 \(token 160: 5 steps x 4 windows x 8 tokens\)",
    ):
        tokembed.train(config, model, progress=False)
    assert not (tmp_path / "run").exists()


# ----------------------------------------------------------------------------------- schedule files


def test_toml_and_json_schedules(four, tmp_path):
    (tmp_path / "runs").mkdir()
    toml = tmp_path / "runs" / "schedule.toml"
    toml.write_text(
        f"""seed = 4
[sources]
web = "../{four[0].name}"
code = "{four[3]}"

[[phases]]
start = 0
weights = {{ web = 0.7, code = 0.3 }}

[[phases]]
name = "anneal"
start = 1_000
weights = {{ code = 1 }}
"""
    )
    as_json = {
        "seed": 4,
        "phases": [
            {"start": 0, "weights": {f"../{four[0].name}": 0.7, str(four[3]): 0.3}},
            {"start": 1e3, "weights": {str(four[3]): 1}, "name": "anneal"},
        ],
    }
    (tmp_path / "runs" / "schedule.json").write_text(json.dumps(as_json))
    python = tokembed.PhasedMixture([(0, {four[0]: 0.7, four[3]: 0.3}), (1000, {four[3]: 1}, "anneal")], seed=4)
    for path in (toml, tmp_path / "runs" / "schedule.json"):
        m = tokembed.load_schedule(path)
        assert m.spec() == python.spec()  # relative paths from the file's folder
        assert [p.resolve() for p in m.paths] == [four[0].resolve(), four[3].resolve()]


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "[[phases]]\nstart = 0\nweights = { web = 1 }\n",
            r"phase 1 weighs source 'web', which \[sources\] does not name; named: code",
        ),
        ("[[phase]]\nstart = 0\n", r"unknown key 'phase'; a schedule has 'phases' \(required\), 'sources' and 'seed'"),
        ("[[phases]]\nstart = 0\nweight = { code = 1 }\n", r"phase 1: expected \{'start': tokens, 'weights'"),
        ("[[phases]]\nstart = 0\nweights = { code = 1\n", r"is not valid TOML"),
        ("seed = 1\n", r"lists no phases"),
    ],
)
def test_bad_schedule_files(four, tmp_path, text, message):
    path = tmp_path / "s.toml"
    path.write_text(
        f'[sources]\ncode = "{four[3]}"\n\n{text}'
        if "weights = { web" in text
        else text.replace("code = 1", f'"{four[3]}" = 1')
    )
    with pytest.raises(ValueError, match=message):
        tokembed.load_schedule(path)
    with pytest.raises(FileNotFoundError, match=r"the schedule file .*missing.toml does not exist"):
        tokembed.load_schedule(tmp_path / "missing.toml")
    (tmp_path / "s.yaml").write_text("phases: []")
    with pytest.raises(ValueError, match=r"neither .toml nor .json"):
        tokembed.load_schedule(tmp_path / "s.yaml")


def test_a_spec_round_trips(four):
    m = phased(four)
    again = tokembed.PhasedMixture.from_spec(json.loads(json.dumps(m.spec())))
    assert again.spec() == m.spec() and repr(again) == repr(m)
    from tokembed.data.phases import mixture_from_spec

    assert isinstance(mixture_from_spec(tokembed.Mixture({four[0]: 1}).spec()), tokembed.Mixture)
    with pytest.raises(ValueError, match=r"does not describe a phased mixture"):
        tokembed.PhasedMixture.from_spec({"phases": 3})


# ----------------------------------------------------------------------------------- stats, train


def test_stats_per_phase_count_what_two_ranks_read(four, capsys):
    from tokembed.cli import main
    from tokembed.data.stats import mixture_stats

    m, steps, g = phased(four), 30, 6
    st = mixture_stats(m, steps=steps, global_batch_size=g, max_length=L)
    read = [w for batch in global_batches(m, 2, g=g, steps=steps) for w in batch]  # (folder, start) per slot
    number = {int(p.name[1:]): i for i, p in enumerate(m.paths)}  # folder index -> source number
    sizes = [40, 1, 7, 25]
    firsts = [0, 24, 63, *[steps * g]]
    for k, ph in enumerate(st["phases"]):
        assert (ph["first_window"], ph["first_step"], ph["mid_step"]) == (firsts[k], firsts[k] // g, firsts[k] % g != 0)
        part = read[firsts[k] : firsts[k + 1]]
        assert {r["path"]: r["windows_read"] for r in ph["sources"]} == {
            str(m.paths[number[f]]): sum(1 for w in part if w[0] == f) for f in {w[0] for w in part}
        } | {
            r["path"]: 0
            for r in ph["sources"]
            if r["weight"] and not any(str(m.paths[number[w[0]]]) == r["path"] for w in part)
        }
    for f, n in enumerate(sizes):  # runs out: the step that reads an epoch's last window; restarts: its next one
        slots = [p for p, w in enumerate(read) if w[0] == f]
        events = [
            {
                "epoch": e,
                "window": slots[(e + 1) * n - 1],
                "step": slots[(e + 1) * n - 1] // g,
                "restarts_at_step": slots[(e + 1) * n] // g if (e + 1) * n < len(slots) else None,
            }
            for e in range(len(slots) // n)
        ]
        row = st["sources"][number[f]]
        assert (row["windows_read"], row["runs_out"], row["epochs_completed"]) == (len(slots), events, len(slots) // n)
    assert [r["path"] for r in st["phases"][2]["sources"]] == [str(four[2]), str(four[3])]  # phase 3's sources
    schedule = four[0].parent / "schedule.json"
    spec = {
        "seed": 1,
        "phases": [{"start": s, "weights": {four[i].name: w for i, w in ws.items()}} for s, ws in PHASES],
    }
    schedule.write_text(json.dumps(spec))
    args = ["stats", "--mixture", str(schedule), "--max-length", str(L), "--batch-size", "3", "--world-size", "2"]
    assert main([*args, "--steps", str(steps)]) == 0
    out = capsys.readouterr().out
    assert f"{steps} steps of 6 windows (batch-size 3 x world-size 2): 180 windows of {L} tokens" in out
    assert f"phase 3: from token {62 * L + 1:,} = window 63 = step 10 + 3 windows; 117 windows in the run" in out
    assert main([*args, "--steps", "10"]) == 2
    assert (
        "phase 3 (from token 497) starts at window 63, at or after the end of training at window 60"
        in capsys.readouterr().err
    )


@pytest.mark.slow  # three runs of a GPT-2-vocabulary model (the shards hold ids up to 35,000): ~3 s
def test_train_on_phases_resumes_exactly_and_logs_its_phases(four, tmp_path, capsys):
    m = phased(four)
    model = tokembed.GPTConfig(context_length=L, dim=16, n_layers=1, n_heads=2)
    kw = dict(data=m, max_length=L, batch_size=6, max_steps=14, eval_interval=7, checkpoint_interval=7)
    capsys.readouterr()
    whole = tokembed.train(
        tokembed.TrainConfig(out=str(tmp_path / "whole"), **kw), model, progress="lines", log_every=1000
    )
    assert [r["phase"] for r in whole.log["train"]] == [1] * 4 + [2] * 7 + [3] * 3  # step 11 starts in phase 2
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("data: ")]
    assert said[0].startswith("data: step 1 reads phase 1 (from token 0), 1 of 3: ")
    assert said[1].startswith("data: step 5 starts phase 2 (from token 192), 2 of 3: ") and "(window 24)" in said[1]
    assert said[2].startswith(f"data: step 11 starts phase 3 (from token {62 * L + 1:,}), 3 of 3: ")
    assert said[2].endswith("(window 63, 3 windows into the step)")
    tokembed.train(tokembed.TrainConfig(out=str(tmp_path / "split"), **kw), model, progress=False, stop_at=4)
    rest = tokembed.train(tokembed.TrainConfig(out=str(tmp_path / "split"), **kw), None, progress=False, resume=True)
    assert [r["loss"] for r in rest.log["train"]] == [r["loss"] for r in whole.log["train"]]  # across two phases
    config = json.loads((tmp_path / "whole" / "config.json").read_text())
    assert config["train"]["data"] == m.spec()  # the checkpoint records the schedule
    state = json.loads((tmp_path / "whole" / "state.json").read_text())
    assert [ph["start"] for ph in state["loader"]["config"]["phases"]] == [0, 192, 62 * L + 1]


def test_train_resumes_a_schedule_whose_sources_moved_by_their_content(four, tmp_path):
    m = phased(four)
    model = {"context_length": L, "dim": 16, "n_layers": 1, "n_heads": 2}
    kw = dict(max_length=L, batch_size=6, max_steps=14, checkpoint_interval=100)
    split = str(tmp_path / "split")
    whole = tokembed.train({"data": m, "out": str(tmp_path / "whole"), **kw}, model, progress=False)
    tokembed.train({"data": m, "out": split, **kw}, model, progress=False, stop_at=6)  # in phase 2
    state = json.loads((tmp_path / "split" / "state.json").read_text())
    assert len(state["data"]["sources"]) == 4  # the data's identity: each source's content, every phase's
    moved = tmp_path / "moved"
    moved.mkdir()
    for p in four:
        p.rename(moved / p.name)
    there = [moved / p.name for p in four]
    with pytest.raises(
        FileNotFoundError, match=r"the checkpoint's data .*s0.* does not exist .*--mixture FILE, a schedule naming"
    ):
        tokembed.train({"out": split}, resume=True, progress=False)
    with pytest.raises(
        ValueError,
        match=r"--resume: the checkpoint was trained on a phased mixture of 3 phases over .*s0.* \(seed 1\), not a "
        r"phased mixture of 3 phases over .*moved.*s0.* \(seed 2\)",
    ):
        tokembed.train({"data": phased(there, seed=2), "out": split}, resume=True, progress=False)
    write_source(there[2], 2, [[7 * L + 5]])  # source s2, read in phase 1, now holds other tokens
    with pytest.raises(ValueError, match=r"another dataset: source 1 \(.*s2\), read before the state was saved"):
        tokembed.train({"data": phased(there), "out": split}, resume=True, progress=False)
    write_source(there[2], 2, [[7 * L]])
    rest = tokembed.train({"data": phased(there), "out": split}, resume=True, progress=False)
    assert [r["loss"] for r in rest.log["train"]] == [r["loss"] for r in whole.log["train"]]
    config = json.loads((tmp_path / "split" / "config.json").read_text())
    assert config["train"]["data"] == phased(there).spec()  # the checkpoint names where the data is now


def test_train_packing_on_phases_resumes_exactly(four, tmp_path):
    m = phased(four)
    kw = dict(data=m, max_length=L, batch_size=6, max_steps=14, packing="best-fit", checkpoint_interval=100)
    model = {"context_length": L, "dim": 16, "n_layers": 1, "n_heads": 2}
    whole = tokembed.train({"out": str(tmp_path / "whole"), **kw}, model, progress=False)
    assert [r["phase"] for r in whole.log["train"]] == [1] * 4 + [2] * 7 + [3] * 3  # the same phases, packed
    tokembed.train({"out": str(tmp_path / "split"), **kw}, model, progress=False, stop_at=5)
    rest = tokembed.train({"out": str(tmp_path / "split"), "data": m}, resume=True, progress=False)
    assert [r["loss"] for r in rest.log["train"]] == [r["loss"] for r in whole.log["train"]]


def add_val_split(path: Path, i: int, n: int) -> None:
    """Give source folder ``path`` (source ``i``) a val split of one document of ``n`` tokens of its own."""
    other = path.parent / f"{path.name}-val"
    write_shards(other, [[np.arange(n) + i * BASE + 5_000]], split="val")
    (other / "val").rename(path / "val")
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["splits"]["val"] = json.loads((other / "manifest.json").read_text())["splits"]["val"]
    (path / "manifest.json").write_text(json.dumps(manifest))


def test_the_validation_total_weighs_the_sources_as_the_phase_in_effect(four, capsys):
    for i, p in enumerate(four):
        add_val_split(p, i, 6 * L)
    m = phased(four)
    config = dict(data=m, max_length=L, batch_size=6, max_steps=14, eval_interval=4, eval_batches=1)
    result = tokembed.train(
        tokembed.TrainConfig(out=str(four[0].parent / "run"), **config),
        tokembed.GPTConfig(context_length=L, dim=16, n_layers=1, n_heads=2),
        progress=False,
    )
    # Steps 4: phase 1; 8: phase 2; 12 and 14: phase 3 (step 11 is phase 2's: its first window is).
    in_effect = {4: 0, 8: 1, 12: 2, 14: 2}
    assert [e["step"] for e in result.log["val"]] == list(in_effect)
    for entry in result.log["val"]:
        weights = PHASES[in_effect[entry["step"]]][1]
        by_folder = {Path(k).name: v for k, v in entry["sources"].items()}
        assert set(by_folder) == {"s0", "s1", "s2", "s3"}  # every source is scored, read now or not
        total = sum(w * by_folder[f"s{i}"] for i, w in weights.items()) / sum(weights.values())
        assert entry["loss"] == pytest.approx(total, rel=1e-9)
    (row,) = tokembed.evaluate(result.checkpoint, lengths=[L], max_windows=2)  # at step 14: phase 3's weights
    weights = {Path(r["source"]).name: r["weight"] for r in row["sources"]}
    assert weights == {"s0": 0.0, "s1": 0.0, "s2": 0.5, "s3": 0.5}
    assert row["loss"] == pytest.approx(sum(r["weight"] * r["loss"] for r in row["sources"]))
    # `tokembed eval CKPT` (which loads the checkpoint itself, for --allow-unverified) weighs them the same way
    from tokembed.cli import main

    capsys.readouterr()
    assert main(["eval", str(result.checkpoint), "--lengths", str(L), "--max-windows", "2", "--json"]) == 0
    (cli_row,) = json.loads(capsys.readouterr().out)
    assert {Path(r["source"]).name: r["weight"] for r in cli_row["sources"]} == weights
    assert cli_row["loss"] == pytest.approx(row["loss"], rel=1e-9)


def test_train_cli_with_a_schedule_file_grows_it_on_resume(four, tmp_path, capsys):
    from tokembed.cli import main

    schedule = tmp_path / "schedule.toml"
    phase = "[[phases]]\nstart = {}\nweights = {{ {} }}\n"
    first = phase.format(0, "s0 = 0.7, s2 = 0.3") + phase.format(10 * L, "s3 = 1")
    schedule.write_text(first)
    run = ["train", "--mixture", str(schedule), "--out", str(tmp_path / "run"), "--quiet"]
    small = ["--dim", "16", "--layers", "1", "--heads", "2", "--max-length", str(L), "--batch-size", "4"]
    assert main([*run, *small, "--steps", "5"]) == 0
    schedule.write_text(first + phase.format(30 * L, "s1 = 1, s3 = 1"))  # a phase the run did not plan for
    assert main([*run, "--resume", "--steps", "10"]) == 0
    log = json.loads((tmp_path / "run" / "log.json").read_text())
    assert log["schedule"] == [
        {"step": 5, "change": f"the schedule adds phase 3 (from token 240): weights [{four[3]}: 1/2, {four[1]}: 1/2]"}
    ]
    assert [r["phase"] for r in log["train"]] == [1, 1, 1, 2, 2, 2, 2, 2, 3, 3]  # a step is in its first window's phase
    data = json.loads((tmp_path / "run" / "config.json").read_text())["train"]["data"]
    assert [ph["start"] for ph in data["phases"]] == [0, 10 * L, 30 * L]
    schedule.write_text(phase.format(0, "s0 = 0.5, s2 = 0.5") + phase.format(10 * L, "s3 = 1"))
    assert main([*run, "--resume", "--steps", "12"]) == 2
    assert (
        "phase 1 (from token 0) had started at the state's position, token 320 (window 40)" in capsys.readouterr().err
    )
    assert main(["train", str(four[0]), "--mixture", str(schedule), "--out", str(tmp_path / "x")]) == 2
    assert "as DATA, as --source PATH:WEIGHT options (repeated) or as --mixture FILE" in capsys.readouterr().err


@pytest.mark.slow
def test_torchrun_saved_at_two_ranks_resumes_at_three_across_a_phase_boundary(four, tmp_path):
    from test_distributed import TORCHRUN, torchrun

    if not TORCHRUN.exists():
        pytest.skip("torchrun is not installed next to this Python")
    schedule = tmp_path / "schedule.json"  # phase 2 starts at window 33: 3 windows into step 5 of 6 windows
    phases = [{"start": 0, "weights": {"s0": 0.7, "s2": 0.3}}, {"start": 33 * L, "weights": {"s3": 0.6, "s2": 0.4}}]
    schedule.write_text(json.dumps({"seed": 1, "phases": phases}))
    out, g, cut = tmp_path / "out", 6, 3
    out.mkdir()
    torchrun(2, four[0], four[2], out, "save", g, cut, schedule)
    torchrun(3, four[0], four[2], out, "resume", g, cut, schedule)

    def steps(mode: str, world: int, key: str) -> list[list]:
        ranks = [json.loads((out / f"{mode}-{world}-rank{r}.json").read_text()) for r in range(world)]
        return [[w for rec in ranks for w in rec[key][t]] for t in range(len(ranks[0][key]))]  # global batches

    uninterrupted = steps("save", 2, "epoch")  # one nominal epoch: (40 + 7) // 6 = 7 steps
    assert len(uninterrupted) == 7 and steps("resume", 3, "rest") == uninterrupted[cut:]
    sources = [(w[0] if w[0] != 50256 else w[1] - 1) // 10_000 for b in uninterrupted for w in b]
    assert 3 not in sources[:33] and abs(sources[33:].count(3) - 0.6 * len(sources[33:])) < 1  # the boundary, exact


def test_packed_windows_follow_the_same_phases(four):
    from tokembed.data.packed import PackedWindows

    m = phased(four)
    sliding = tokembed.SlidingWindowDataset(m, max_length=L)
    packed = tokembed.create_dataloader(m, batch_size=6, max_length=L, packing="best-fit", shuffle=False).dataset
    slots = np.arange(120)
    codes = packed.codes(slots, shuffle=False)
    source, window = packed.sources_of(codes)
    assert np.array_equal(source, sliding.sources_of(sliding.codes(slots))[0])  # whatever the windows' kind
    x, _ = packed._gather(codes)
    for i, path in enumerate(m.paths):  # each row is its source's own packed window
        own = PackedWindows(path, max_length=L, packing="best-fit")
        assert np.array_equal(x[torch.from_numpy(source == i)], own.gather(window[source == i])[0])
