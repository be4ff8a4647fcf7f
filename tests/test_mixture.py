"""Mixtures: exact proportions in every prefix, per-source epochs, ranks, workers, exact and elastic resume.

Each source is a hand-written shard folder whose tokens count up from ``BASE * i`` (separators apart),
so a window's first tokens say which source and which window it is, independently of tokembed's code.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tokembed
from handmade_shards import EOT, counting_docs, write_shards
from tokembed.data.mixture import PERIOD_MAX, Mixture, QuotaSchedule, parse_source, quota_period

BASE = 10_000  # source i's tokens count from i * BASE
L = 8  # max_length = stride in the loader tests


def write_source(root: Path, i: int, lengths: list[list[int]]) -> np.ndarray:
    docs = [[d + i * BASE for d in shard] for shard in counting_docs(lengths)]
    return write_shards(root, docs)


def ident(row: torch.Tensor) -> tuple[int, int]:
    """(source, start in its stream) of a window, read from its tokens."""
    a, b = int(row[0]), int(row[1])
    first = b - 1 if a == EOT else a
    return first // BASE, first % BASE


@pytest.fixture
def three(tmp_path) -> list[Path]:
    """Three sources of 75, 3 and 21 windows of L tokens (stride L)."""
    sizes = [[[300, 41, 7], [250]], [[30]], [[90, 80]]]
    paths = []
    for i, lengths in enumerate(sizes):
        write_source(tmp_path / f"s{i}", i, lengths)
        paths.append(tmp_path / f"s{i}")
    return paths


def windows_read(loader) -> list[list[tuple[int, int]]]:
    return [[ident(r) for r in x] for x, _ in loader]


# ----------------------------------------------------------------------------------- the schedule


def prefix_counts(schedule: QuotaSchedule, k: int) -> np.ndarray:
    source, _ = schedule.draws(np.arange(k))
    onehot = np.zeros((k, len(schedule.q)), np.int64)
    onehot[np.arange(k), source] = 1
    return np.cumsum(onehot, axis=0)  # (K, S): counts in the prefixes of 1..K slots


weights_st = st.lists(
    st.one_of(st.floats(0.001, 1000), st.just(0.001), st.integers(1, 10**6), st.sampled_from([0.7, 0.2, 0.1])),
    min_size=1,
    max_size=6,
)


@settings(max_examples=30)
@given(weights=weights_st)
def test_every_prefix_is_within_one_window_of_its_share(weights):
    q, period = quota_period(weights)
    schedule = QuotaSchedule(tuple(q), period)
    k = min(2 * period, 12_000)  # two periods when short: the second repeats the first
    counts = prefix_counts(schedule, k)
    ks = np.arange(1, k + 1)[:, None]
    # |c_i(K) - K q_i / Q| < 1, in integers: |c_i(K) Q - K q_i| < Q
    assert np.all(np.abs(counts * period - ks * np.asarray(q)) < period)
    # the weights the bound holds for are the given ones, normalised, to within 1/PERIOD_MAX
    norm = np.asarray(weights, dtype=float) / math.fsum(weights)
    assert np.all(np.abs(np.asarray(q) / period - norm) <= 1 / PERIOD_MAX)
    assert np.array_equal(schedule.counts(k), counts[-1])


def test_far_slots_keep_the_bound_and_decimal_weights_are_exact():
    q, period = quota_period([0.7, 0.2, 0.1])
    assert (q, period) == ([7, 2, 1], 10)
    schedule = QuotaSchedule(tuple(q), period)
    far = 10**12 + np.arange(1000)  # slots far into the order: arithmetic, no history
    source, draw = schedule.draws(far)
    before = schedule.counts(10**12)
    for i in range(3):
        assert np.array_equal(draw[source == i], before[i] + np.arange((source == i).sum()))
        counts = before[i] + np.cumsum(source == i)
        assert np.all(np.abs(counts - Fraction(q[i], period) * (far + 1)) < 1)


def test_a_tiny_weight_gets_its_share_and_no_more():
    q, period = quota_period([0.001, 0.999])
    assert (q, period) == ([1, 999], 1000)
    source, _ = QuotaSchedule(tuple(q), period).draws(np.arange(3000))
    assert np.diff(np.flatnonzero(source == 0)).tolist() == [1000, 1000]  # one window in every 1000 slots


# ----------------------------------------------------------------------------------- the windows


@settings(max_examples=15)
@given(
    sizes=st.lists(st.integers(1, 40), min_size=1, max_size=4),
    weights=st.lists(st.one_of(st.floats(0.001, 10), st.just(0.001)), min_size=4, max_size=4),
    seed=st.integers(0, 2**32),
)
def test_each_source_is_read_in_whole_epochs(tmp_path_factory, sizes, weights, seed):
    root = tmp_path_factory.mktemp("mix")
    for i, n in enumerate(sizes):  # n windows of L tokens: one document of n*L tokens (+ its separator)
        write_source(root / f"s{i}", i, [[n * L]])
    m = Mixture({root / f"s{i}": w for i, w in enumerate(weights[: len(sizes)])}, seed=seed)
    ds = tokembed.SlidingWindowDataset(m, max_length=L)
    assert [len(s) for s in ds.sources] == sizes
    k = 3 * sum(sizes) + 50
    source, window = ds.sources_of(ds.codes(np.arange(k)))
    for i, n in enumerate(sizes):
        seen = window[source == i]
        for e in range(len(seen) // n):  # every complete epoch of a source holds each of its windows once
            assert sorted(seen[e * n : (e + 1) * n].tolist()) == list(range(n))
        part = seen[len(seen) // n * n :]
        assert len(set(part.tolist())) == len(part)  # no window twice before the source's epoch ends


@pytest.mark.parametrize("within", [False, True])
def test_a_mixture_window_is_its_sources_window(three, within):
    m = Mixture({three[0]: 0.5, three[1]: 0.25, three[2]: 0.25}, seed=4)
    ds = tokembed.SlidingWindowDataset(m, max_length=L, stride=3, within_documents=within)
    slots = np.arange(3 * len(ds)) % len(ds)
    x, y = ds.gather(slots)
    source, window = ds.sources_of(ds.codes(slots))
    for i, src in enumerate(ds.sources):  # two paths: the mixture's gather and each source's own
        sx, sy = src.gather(window[source == i])
        assert torch.equal(x[torch.from_numpy(source == i)], sx) and torch.equal(y[torch.from_numpy(source == i)], sy)
    assert torch.equal(x[:, 1:], y[:, :-1])
    assert [ident(r)[0] for r in x] == source.tolist()


def test_the_order_is_a_function_of_the_seeds(three):
    def order(mix_seed, loader_seed):
        m = Mixture({three[0]: 0.6, three[2]: 0.4}, seed=mix_seed)
        return windows_read(tokembed.create_dataloader(m, batch_size=4, max_length=L, seed=loader_seed))

    assert order(1, 2) == order(1, 2)
    assert order(1, 2) != order(3, 2) and order(1, 2) != order(1, 5)
    m = Mixture({three[0]: 0.6, three[2]: 0.4})
    plain = windows_read(tokembed.create_dataloader(m, batch_size=4, max_length=L, shuffle=False))
    assert [s for b in plain for (src, s) in b if src == 2][:21] == [k * L for k in range(21)]  # in order


# ----------------------------------------------------------------------------------- the loader


def global_batches(m, world, g=6, **kw) -> list[list[tuple[int, int]]]:
    per_rank = [
        windows_read(tokembed.create_dataloader(m, global_batch_size=g, max_length=L, rank=r, world_size=world, **kw))
        for r in range(world)
    ]
    return [[w for r in range(world) for w in per_rank[r][t]] for t in range(len(per_rank[0]))]


@pytest.mark.parametrize("world", [2, 3])
def test_ranks_read_disjoint_parts_of_each_global_batch(three, world):
    m = Mixture({three[0]: 0.5, three[1]: 0.2, three[2]: 0.3}, seed=2)
    one = global_batches(m, 1)
    assert global_batches(m, world) == one  # each step's global batch, dealt out to the ranks in order
    ds = tokembed.SlidingWindowDataset(m, max_length=L)
    source, window = ds.sources_of(ds.codes(np.arange(len(one) * 6)))
    expected = [(int(s), int(w) * L) for s, w in zip(source, window)]
    assert [w for b in one for w in b] == expected  # the global order, slot after slot


def test_workers_give_the_same_batches(three):
    m = Mixture({three[0]: 0.5, three[1]: 0.2, three[2]: 0.3}, seed=2)
    ref = windows_read(tokembed.create_dataloader(m, batch_size=4, max_length=L))
    assert windows_read(tokembed.create_dataloader(m, batch_size=4, max_length=L, num_workers=2)) == ref


def test_epochs_continue_the_global_order(three):
    m = Mixture({three[0]: 0.5, three[1]: 0.2, three[2]: 0.3}, seed=2)
    loader = tokembed.create_dataloader(m, batch_size=4, max_length=L)
    first, second = windows_read(loader), windows_read(loader)
    assert len(first) == len(loader) == 99 // 4 and loader.epoch == 2
    ds = tokembed.SlidingWindowDataset(m, max_length=L)
    source, window = ds.sources_of(ds.codes(np.arange(2 * 24 * 4)))
    assert [w for b in first + second for w in b] == [(int(s), int(w) * L) for s, w in zip(source, window)]


@pytest.mark.parametrize("cut", [0, 5, 16])
@pytest.mark.parametrize("after", [1, 3])
def test_elastic_resume_reads_exactly_what_remained(three, cut, after):
    m = Mixture({three[0]: 0.5, three[1]: 0.2, three[2]: 0.3}, seed=2)
    reference = global_batches(m, 1)
    saver = tokembed.create_dataloader(m, global_batch_size=6, max_length=L, rank=1, world_size=2)
    it = iter(saver)
    for _ in range(cut):
        next(it)
    state = json.loads(json.dumps(saver.state_dict()))
    rest = []
    for r in range(after):
        loader = tokembed.create_dataloader(m, global_batch_size=6, max_length=L, rank=r, world_size=after)
        loader.load_state_dict(state)
        rest.append(windows_read(loader))
    resumed = [[w for r in range(after) for w in rest[r][t]] for t in range(len(rest[0]))]
    assert resumed == reference[cut:]


def test_elastic_resume_of_one_folder(tmp_path):
    write_source(tmp_path / "s", 0, [[300, 41, 7], [250]])

    def loader(world, r, **kw):
        return tokembed.create_dataloader(
            tmp_path / "s", global_batch_size=6, max_length=L, rank=r, world_size=world, **kw
        )

    reference = windows_read(loader(1, 0))
    saver = loader(3, 2)
    it = iter(saver)
    next(it), next(it), next(it)
    parts = []
    for r in range(2):
        b = loader(2, r)
        b.load_state_dict(saver.state_dict())
        parts.append(windows_read(b))
    assert [parts[0][t] + parts[1][t] for t in range(len(parts[0]))] == reference[3:]


# ----------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "weights, error, message",
    [
        ([0.5, -0.1], ValueError, r"weight of source .*s1 must be a finite number >= 0, got -0.1"),
        ([0.5, float("nan")], ValueError, r"must be a finite number >= 0, got nan"),
        ([0.5, float("inf")], ValueError, r"must be a finite number >= 0, got inf"),
        ([0, 0.0], ValueError, r"sum to 0; give at least one source a positive weight"),
        ([0.5, "0.5"], TypeError, r"must be a number, got '0.5' \(str\)"),
        ([0.5, True], TypeError, r"must be a number, got True \(bool\)"),
        ([1.0, 1e-7], ValueError, r"s1 is under 1/131072 of the total"),
    ],
)
def test_bad_weights(three, weights, error, message):
    with pytest.raises(error, match=message):
        Mixture({three[0]: weights[0], three[1]: weights[1]})


def test_bad_sources(three, tmp_path):
    with pytest.raises(ValueError, match=r"at least one source"):
        Mixture({})
    with pytest.raises(ValueError, match=r"listed twice"):
        Mixture([(three[0], 1), (str(three[0]) + "/", 1)])
    with pytest.raises(FileNotFoundError, match=r"shard folder .*nowhere does not exist"):
        Mixture({three[0]: 1, tmp_path / "nowhere": 1})
    bad = tmp_path / "bad"
    write_source(bad, 1, [[50]])
    (bad / "train" / "00000.bin").write_bytes(b"\0\0")  # truncated: fails `tokembed check`
    with pytest.raises(ValueError, match=r"shard train/00000.bin of .*bad is damaged.*tokembed check"):
        tokembed.SlidingWindowDataset(Mixture({three[0]: 1, bad: 1}), max_length=L)


def test_sources_of_different_tokenizers_are_refused_naming_both(three):
    manifest = json.loads((three[2] / "manifest.json").read_text())
    manifest["tokenizer"] = {"name": "cl100k_base", "n_vocab": 100277, "eot_token": 100257, "hash": "ab" * 32}
    (three[2] / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(
        ValueError, match=r"sources .*s0 and .*s2 were tokenized differently: .*s0 by gpt2 .*s2 by cl100k_base"
    ):
        Mixture({three[0]: 1, three[1]: 1, three[2]: 1})


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(weights=(0.4, 0.3, 0.3)), r"weights=\['1/2', '1/5', '3/10'\] \(this loader: \['2/5', '3/10', '3/10'\]\)"),
        (dict(mixture_seed=9), r"mixture_seed=2 \(this loader: 9\)"),
        (dict(seed=1), r"seed=0 \(this loader: 1\)"),
        (dict(global_batch_size=8), r"global_batch_size=6 \(this loader: 8\)"),
        (dict(sources=(0, 2)), r"another dataset: data="),
    ],
)
def test_a_state_of_other_sources_or_options_is_refused(three, change, message):
    def loader(weights=(0.5, 0.2, 0.3), mixture_seed=2, sources=(0, 1, 2), global_batch_size=6, seed=0):
        m = Mixture({three[i]: w for i, w in zip(sources, weights)}, seed=mixture_seed)
        return tokembed.create_dataloader(
            m, global_batch_size=global_batch_size, max_length=L, seed=seed, rank=0, world_size=2
        )

    state = loader().state_dict()
    with pytest.raises(ValueError, match=r"the state was saved by a loader over .*" + message):
        loader(**change).load_state_dict(state)


def test_a_world_size_that_does_not_divide_the_global_batch(three):
    m = Mixture({three[0]: 1, three[2]: 1})
    with pytest.raises(
        ValueError, match=r"global_batch_size=8 is not divisible by world_size=3.*use a multiple of 3 \(e.g. 6\)"
    ):
        tokembed.create_dataloader(m, global_batch_size=8, max_length=L, rank=0, world_size=3)
    with pytest.raises(ValueError, match=r"batch_size=3 x world_size=2 is not global_batch_size=8"):
        tokembed.create_dataloader(m, batch_size=3, global_batch_size=8, max_length=L, rank=0, world_size=2)
    with pytest.raises(TypeError, match=r"needs batch_size .* or global_batch_size"):
        tokembed.create_dataloader(m, max_length=L)


def test_parse_source():
    assert parse_source("shards/web:0.7") == ("shards/web", 0.7)
    assert parse_source("C:/data/x:3") == ("C:/data/x", 3.0)
    with pytest.raises(ValueError, match=r"--source 'shards/web' is not PATH:WEIGHT"):
        parse_source("shards/web")
    with pytest.raises(ValueError, match=r"is not PATH:WEIGHT"):
        parse_source("shards/web:lots")


# ----------------------------------------------------------------------------------- stats, train


@pytest.mark.parametrize("steps", [3, 40])
def test_stats_count_what_the_loader_reads(three, steps, capsys):
    from tokembed.cli import main
    from tokembed.data.stats import mixture_stats

    m = Mixture({three[0]: 0.5, three[1]: 0.2, three[2]: 0.3}, seed=2)
    st = mixture_stats(m, steps=steps, global_batch_size=6, max_length=L)
    read = []  # what two ranks actually read over `steps` steps, epochs after epochs
    loaders = [tokembed.create_dataloader(m, batch_size=3, max_length=L, rank=r, world_size=2) for r in range(2)]
    while len(read) < steps * 6:
        for batches in zip(*(windows_read(x) for x in loaders)):
            read += [w for b in batches for w in b]
    counts = np.bincount([s for s, _ in read[: steps * 6]], minlength=3)
    assert [r["windows_read"] for r in st["sources"]] == counts.tolist()
    assert [r["windows"] for r in st["sources"]] == [75, 3, 21]
    assert [r["epochs"] for r in st["sources"]] == pytest.approx((counts / [75, 3, 21]).tolist())
    source = [a for i, p in enumerate(three) for a in ("--source", f"{p}:{[0.5, 0.2, 0.3][i]}")]
    assert (
        main(
            ["stats", *source, "--max-length", str(L), "--batch-size", "3", "--world-size", "2", "--steps", str(steps)]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert f"{steps} steps of 6 windows" in out and f"{counts[1]:>13,}{counts[1] / 3:>10.3f}" in out


@pytest.mark.slow
def test_train_on_a_mixture_resumes_exactly(three, tmp_path, capsys):
    from tokembed.cli import main

    m = Mixture({three[0]: 0.6, three[2]: 0.4})
    model = tokembed.GPTConfig(context_length=8, dim=16, n_layers=1, n_heads=2)
    kw = dict(data=m, max_length=L, batch_size=4, max_steps=30, eval_interval=10, checkpoint_interval=10)
    whole = tokembed.train(tokembed.TrainConfig(out=str(tmp_path / "whole"), **kw), model, progress=False)
    tokembed.train(tokembed.TrainConfig(out=str(tmp_path / "split"), **kw), model, progress=False, stop_at=13)
    rest = tokembed.train(tokembed.TrainConfig(out=str(tmp_path / "split"), **kw), None, progress=False, resume=True)
    assert [r["loss"] for r in rest.log["train"]] == [r["loss"] for r in whole.log["train"]]  # 30 steps > an epoch
    saved = json.loads((tmp_path / "whole" / "config.json").read_text())["train"]["data"]
    assert saved == {"sources": [[str(three[0]), 0.6], [str(three[2]), 0.4]], "seed": 0}
    args = ["train", "--source", f"{three[0]}:0.6", "--source", f"{three[2]}:0.4", "--out", str(tmp_path / "cli")]
    small = ["--dim", "16", "--layers", "1", "--heads", "2", "--max-length", str(L), "--steps", "2", "--quiet"]
    assert main([*args, *small]) == 0
    assert main([*args, "--resume", "--steps", "3", "--quiet"]) == 0
    other = ["train", "--source", f"{three[0]}:0.5", "--source", f"{three[2]}:0.5", "--out", str(tmp_path / "cli")]
    assert main([*other, "--resume", "--steps", "4", "--quiet"]) == 2
    assert "--resume: the checkpoint was trained on" in capsys.readouterr().err
    assert main(["train", str(three[0]), "--source", f"{three[2]}:1", "--out", str(tmp_path / "x")]) == 2
    assert "either as DATA, as --source PATH:WEIGHT options (repeated) or as --mixture FILE" in capsys.readouterr().err


@settings(max_examples=20)
@given(
    ns=st.lists(st.integers(1, 5000), min_size=1, max_size=5),
    seed=st.integers(0, 2**40),
    k=st.integers(1, 300),
)
def test_a_feistel_family_agrees_with_each_permutation(ns, seed, k):
    from tokembed.data.shuffle import FeistelFamily, FeistelPermutation

    perms = [FeistelPermutation(n, seed=seed, epoch=e) for e, n in enumerate(ns)]
    rng = np.random.default_rng(seed % 2**32)
    group = rng.integers(0, len(ns), k)
    pos = rng.integers(0, np.asarray(ns)[group])
    expected = [int(perms[g](np.array([p]))[0]) for g, p in zip(group.tolist(), pos.tolist())]
    assert FeistelFamily(perms)(pos, group).tolist() == expected  # two paths: one pass, or one permutation each
