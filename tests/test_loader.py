"""create_dataloader: epochs without replacement, ranks, workers, exact resume, and the drop-in's speed path.

Windows are identified through token arrays that count (``np.arange``): a batch's first input
column is then the start of each window, so coverage and disjointness are checked from the data
itself, against ``range(0, N - L, stride)``.
"""

from __future__ import annotations

import dataclasses
import json
import tracemalloc

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tokembed
from book_reference import book_create_dataloader_v1
from handmade_shards import counting_docs, write_shards
from tokembed.data.plan import rank_plan
from tokembed.data.shuffle import FeistelPermutation


def starts_of(batches) -> list[list[int]]:
    return [x[:, 0].tolist() for x, _ in batches]


def flat(lists) -> list[int]:
    return [s for b in lists for s in b]


# ----------------------------------------------------------------------------------- permutation


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 3000), seed=st.integers(0, 2**40), epoch=st.integers(0, 1000))
def test_feistel_is_a_permutation(n, seed, epoch):
    p = FeistelPermutation(n, seed=seed, epoch=epoch)(np.arange(n))
    assert sorted(p.tolist()) == list(range(n))


def test_feistel_is_a_function_of_seed_and_epoch_only():
    n = 10_000
    a = FeistelPermutation(n, seed=3, epoch=1)(np.arange(n))
    # Evaluated piecewise, in any order: the same values (it is a formula, not a stream).
    pos = np.random.default_rng(0).permutation(n)
    assert np.array_equal(FeistelPermutation(n, seed=3, epoch=1)(pos), a[pos])
    assert not np.array_equal(a, FeistelPermutation(n, seed=3, epoch=2)(np.arange(n)))
    assert not np.array_equal(a, FeistelPermutation(n, seed=4, epoch=1)(np.arange(n)))


def test_feistel_order_looks_random():
    n = 20_000
    p = FeistelPermutation(n, seed=0, epoch=0)(np.arange(n)).astype(float)
    assert abs(np.corrcoef(np.arange(n), p)[0, 1]) < 0.03  # no trend with position
    assert abs(np.corrcoef(p[:-1], p[1:])[0, 1]) < 0.03  # neighbours unrelated
    first_tenth = p[: n // 10]
    assert np.histogram(first_tenth, bins=10, range=(0, n))[0].min() > 0.7 * (n // 100)  # spread over all windows


def test_feistel_needs_no_memory_for_a_huge_domain():
    perm = FeistelPermutation(10**12, seed=1, epoch=0)
    tracemalloc.start()
    out = perm(np.arange(5 * 10**11, 5 * 10**11 + 64))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 100_000 and len(set(out.tolist())) == 64 and out.min() >= 0 and out.max() < 10**12


# ----------------------------------------------------------------------------------- one epoch


@settings(max_examples=50, deadline=None)
@given(
    n=st.integers(4, 400),
    b=st.integers(1, 9),
    stride=st.integers(1, 5),
    shuffle=st.booleans(),
    drop_last=st.booleans(),
    seed=st.integers(0, 99),
)
def test_one_epoch_is_every_window_once(n, b, stride, shuffle, drop_last, seed):
    windows = list(range(0, n - 3, stride))
    if drop_last and len(windows) < b:
        with pytest.raises(
            ValueError, match=rf"gives {len(windows)} windows, fewer than batch_size={b} x world_size=1"
        ):
            tokembed.create_dataloader(np.arange(n), batch_size=b, max_length=3, stride=stride, drop_last=drop_last)
        return
    loader = tokembed.create_dataloader(
        np.arange(n), batch_size=b, max_length=3, stride=stride, shuffle=shuffle, seed=seed, drop_last=drop_last
    )
    batches = list(loader)
    got = starts_of(batches)
    assert len(got) == len(loader)
    for x, y in batches:
        assert x.dtype == y.dtype == torch.int64 and x.shape[1] == 3 and torch.equal(y, x + 1)  # counting tokens
    assert all(len(g) == b for g in got[:-1])
    seen = flat(got)
    assert len(seen) == len(set(seen))  # without replacement
    if drop_last:
        assert len(seen) == len(windows) // b * b and set(seen) <= set(windows)
    else:
        assert sorted(seen) == windows
    if not shuffle:
        assert seen == windows[: len(seen)]


@pytest.mark.parametrize("drop_last", [True, False])
def test_unshuffled_batches_are_the_books(story, drop_last):
    ours = list(
        tokembed.create_dataloader(story, batch_size=8, max_length=4, stride=4, shuffle=False, drop_last=drop_last)
    )
    book = list(
        book_create_dataloader_v1(story, batch_size=8, max_length=4, stride=4, shuffle=False, drop_last=drop_last)
    )
    assert len(ours) == len(book)
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(ours, book))


def test_epochs_are_reproducible_and_differ():
    def epoch(e, seed=0):
        loader = tokembed.create_dataloader(np.arange(5000), batch_size=16, max_length=8, stride=3, seed=seed)
        loader.set_epoch(e)
        return flat(starts_of(loader))

    assert epoch(2) == epoch(2)
    assert epoch(2) != epoch(3) and sorted(epoch(2)) == sorted(epoch(3))
    assert epoch(2) != epoch(2, seed=1)
    # A loader that ran epoch 0 to its end moves on to epoch 1 by itself, as set_epoch(1) does.
    loader = tokembed.create_dataloader(np.arange(5000), batch_size=16, max_length=8, stride=3)
    assert flat(starts_of(loader)) == epoch(0) and loader.epoch == 1
    assert flat(starts_of(loader)) == epoch(1)


def test_an_epoch_does_not_build_a_permutation_of_all_windows():
    ids = (np.arange(8_000_000) % 50000).astype(np.uint16)  # 8 M windows at stride 1: randperm(N) would be 64 MB
    loader = tokembed.create_dataloader(ids, batch_size=8, max_length=16, stride=1)
    tracemalloc.start()
    it = iter(loader)
    for _ in range(100):
        next(it)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 8_000_000  # blocks of 65,536 positions, whatever N


# ----------------------------------------------------------------------------------- ranks


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(2, 300), b=st.integers(1, 6), world=st.integers(1, 4), drop_last=st.booleans(), shuffle=st.booleans()
)
def test_ranks_are_disjoint_and_complete(n, b, world, drop_last, shuffle):
    windows = list(range(0, n - 1))  # max_length 1, stride 1
    plan = rank_plan(len(windows), batch_size=b, world_size=world, drop_last=drop_last)
    if plan.batches == 0:
        with pytest.raises(ValueError, match=rf"fewer than batch_size={b} x world_size={world}"):
            tokembed.create_dataloader(
                np.arange(n), batch_size=b, max_length=1, rank=0, world_size=world, drop_last=drop_last
            )
        return
    per_rank = []
    for r in range(world):
        loader = tokembed.create_dataloader(
            np.arange(n),
            batch_size=b,
            max_length=1,
            rank=r,
            world_size=world,
            drop_last=drop_last,
            shuffle=shuffle,
            seed=5,
        )
        got = starts_of(loader)
        assert len(got) == len(loader) == plan.batches  # every rank takes the same number of steps
        assert [len(g) for g in got] == [b] * plan.full_steps + [plan.last_batch_size] * (
            plan.batches - plan.full_steps
        )
        per_rank.append(flat(got))
    seen = flat(per_rank)
    if drop_last:
        assert len(seen) == len(set(seen)) == len(windows) - plan.dropped_windows
        assert plan.dropped_windows < b * world
    else:
        assert set(seen) == set(windows)  # complete
        assert len(seen) - len(windows) == plan.padded_windows < world  # only the padding is seen twice
    # Together the ranks see what one process sees with batch_size * world_size, in the same order.
    if drop_last:
        single = flat(
            starts_of(
                tokembed.create_dataloader(np.arange(n), batch_size=b * world, max_length=1, shuffle=shuffle, seed=5)
            )
        )
        assert sorted(seen) == sorted(single)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(rank=2, world_size=2), ValueError, r"rank 2 is outside world_size=2: ranks are 0..1"),
        (dict(rank=-1, world_size=2), ValueError, r"rank -1 is outside world_size=2"),
        (dict(rank=0), ValueError, r"give both rank and world_size or neither, got rank=0, world_size=None"),
        (dict(rank=0, world_size=0), ValueError, r"world_size must be >= 1, got 0"),
        (dict(batch_size=0), ValueError, r"batch_size must be >= 1, got 0"),
        (dict(stride=0), ValueError, r"stride must be >= 1, got 0"),
        (dict(max_length=5000), ValueError, r"has 1000 tokens, but one window of max_length=5000 needs at least 5001"),
        (dict(seed=-1), ValueError, r"seed must be an integer >= 0, got -1"),
        (dict(num_workers=-1), ValueError, r"num_workers must be an integer >= 0, got -1"),
    ],
)
def test_bad_arguments(kwargs, error, message):
    args = dict(batch_size=4, max_length=8) | kwargs
    with pytest.raises(error, match=message):
        tokembed.create_dataloader(np.arange(1000), **args)


def test_max_length_is_required_for_raw_sources():
    with pytest.raises(TypeError, match=r"needs max_length"):
        tokembed.create_dataloader(np.arange(100), batch_size=2)
    ds = tokembed.SlidingWindowDataset(np.arange(100), max_length=4)
    assert len(tokembed.create_dataloader(ds, batch_size=2)) == len(ds) // 2
    with pytest.raises(ValueError, match=r"max_length=8 differs from the dataset's max_length=4"):
        tokembed.create_dataloader(ds, batch_size=2, max_length=8)


# ----------------------------------------------------------------------------------- workers


@pytest.mark.slow
def test_workers_give_the_same_batches_and_split_the_work(tmp_path):
    stream = write_shards(tmp_path, counting_docs([[900] * 5, [700] * 6, [3000]]))
    kw = dict(batch_size=8, max_length=32, stride=5, seed=9, rank=1, world_size=2)
    one = list(tokembed.create_dataloader(tmp_path, **kw))
    for w in (1, 2):
        many = list(tokembed.create_dataloader(tmp_path, num_workers=w, **kw))
        assert len(many) == len(one)
        assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(one, many))
    # Which worker makes which batch: worker w of n makes this rank's batches w, w+n, ... (disjoint).
    from types import SimpleNamespace

    from tokembed.data.loader import _RankBatches

    loader = tokembed.create_dataloader(tmp_path, **kw)
    expected = [x[:, 0].tolist() for x, _ in one]
    n = 3
    for w in range(n):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(torch.utils.data, "get_worker_info", lambda: SimpleNamespace(id=w, num_workers=n))  # noqa: B023 (used within the iteration)
            mine = [x[:, 0].tolist() for x, _ in _RankBatches(loader.dataset, loader._epoch_arith(), 0)]
        assert mine == expected[w::n]
    assert stream.size > 0


# ----------------------------------------------------------------------------------- resume


def _loader(**kw):
    args = dict(batch_size=4, max_length=8, stride=3, seed=1) | kw
    return tokembed.create_dataloader(np.arange(700), **args)


@pytest.mark.parametrize("cut", [0, 1, 17, 57])
def test_resume_mid_epoch_yields_exactly_what_remained(cut):
    reference = _loader()
    full = starts_of(reference) + starts_of(reference)  # epochs 0 and 1
    loader = _loader()
    it = iter(loader)
    head = [next(it)[0][:, 0].tolist() for _ in range(cut)]
    state = json.loads(json.dumps(loader.state_dict()))  # plain JSON: it goes into any checkpoint
    assert state["epoch"] == 0 and state["batches_done"] == cut
    resumed = _loader()
    resumed.load_state_dict(state)
    rest = starts_of(resumed)
    assert head + rest == full[: len(reference)]
    assert starts_of(resumed) == full[len(reference) :]  # and the next epoch follows


def test_resume_across_epochs_with_set_epoch():
    a = _loader()
    for e in range(2):
        a.set_epoch(e)
        list(a)
    a.set_epoch(2)
    it = iter(a)
    for _ in range(10):
        next(it)
    state = a.state_dict()
    b = _loader()
    b.load_state_dict(state)
    b.set_epoch(2)  # a training loop calls this again after resuming: it keeps the position
    ref = _loader()
    ref.set_epoch(2)
    assert starts_of(b) == starts_of(ref)[10:]


def test_resume_at_the_end_of_an_epoch_goes_on_with_the_next():
    a = _loader()
    it = iter(a)
    batches = [next(it) for _ in range(len(a))]  # the loop has not asked for more yet
    assert len(batches) == len(a)
    b = _loader()
    b.load_state_dict(a.state_dict())
    assert list(b) == []
    ref = _loader()
    ref.set_epoch(1)
    assert starts_of(b) == starts_of(ref)


@pytest.mark.slow
@pytest.mark.parametrize("workers_before, workers_after", [(2, 2), (0, 2), (2, 0)])
def test_resume_with_workers(workers_before, workers_after):
    reference = starts_of(_loader(rank=1, world_size=3))
    a = _loader(rank=1, world_size=3, num_workers=workers_before)
    it = iter(a)
    head = [next(it)[0][:, 0].tolist() for _ in range(5)]  # workers have prefetched more than that
    b = _loader(rank=1, world_size=3, num_workers=workers_after)
    b.load_state_dict(a.state_dict())
    del it
    assert head + starts_of(b) == reference


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(batch_size=5), r"batch_size=4 \(this loader: 5\)"),
        (dict(seed=2), r"seed=1 \(this loader: 2\)"),
        (dict(stride=4), r"windows=231 \(this loader: 173\), .*stride=3 \(this loader: 4\)"),
        (dict(rank=0, world_size=2), r"world_size=1 \(this loader: 2\)"),
        (dict(shuffle=False), r"shuffle=True \(this loader: False\)"),
    ],
)
def test_a_state_from_other_options_is_refused(change, message):
    state = _loader().state_dict()
    with pytest.raises(
        ValueError,
        match=r"the state was saved by a loader over " + message + r".*resume with the same data and options",
    ):
        _loader(**change).load_state_dict(state)


def test_a_state_from_another_dataset_is_refused():
    state = _loader().state_dict()
    other = tokembed.create_dataloader(np.arange(700)[::-1].copy(), batch_size=4, max_length=8, stride=3, seed=1)
    with pytest.raises(ValueError, match=r"over another dataset: data="):
        other.load_state_dict(state)
    with pytest.raises(ValueError, match=r"not a tokembed loader state"):
        other.load_state_dict({"epoch": 1})
    bad = dict(_loader().state_dict(), batches_done=10**6)
    with pytest.raises(ValueError, match=r"batches_done=1000000\) is not within an epoch of 57 batches"):
        _loader().load_state_dict(bad)


def test_a_rank_may_load_another_ranks_state():
    a = _loader(rank=0, world_size=2)
    it = iter(a)
    next(it), next(it)
    b = _loader(rank=1, world_size=2)
    b.load_state_dict(a.state_dict())  # ranks move in step: rank 0's state is everyone's
    assert starts_of(b) == starts_of(_loader(rank=1, world_size=2))[2:]


# ----------------------------------------------------------------------------------- the drop-in


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("drop_last", [True, False])
@pytest.mark.parametrize("b, L, s", [(8, 4, 4), (3, 300, 7), (64, 2, 1)])
def test_the_drop_in_fast_path_gives_the_books_batches(story, shuffle, drop_last, b, L, s):
    # Chunks of many batches are gathered at once: check every chunk boundary case, then the RNG.
    torch.manual_seed(11)
    ours = tokembed.create_dataloader_v1(
        story, batch_size=b, max_length=L, stride=s, shuffle=shuffle, drop_last=drop_last
    )
    it = iter(ours)
    between = torch.rand(2)  # global RNG use between creating the iterator and the first batch
    a = [(x.clone(), y.clone()) for x, y in it] + [tuple(t.clone() for t in bt) for bt in ours]
    after = torch.rand(3)
    torch.manual_seed(11)
    book = book_create_dataloader_v1(story, batch_size=b, max_length=L, stride=s, shuffle=shuffle, drop_last=drop_last)
    it = iter(book)
    assert torch.equal(between, torch.rand(2))
    c = [(x, y) for x, y in it] + [tuple(bt) for bt in book]
    assert torch.equal(after, torch.rand(3))
    assert len(a) == len(c)
    for (x1, y1), (x2, y2) in zip(a, c):
        assert torch.equal(x1, x2) and torch.equal(y1, y2) and x1.is_contiguous() and y1.is_contiguous()
    assert isinstance(ours, torch.utils.data.DataLoader) and type(next(iter(ours))) is list


# ----------------------------------------------------------------------------------- the plan before the run


@pytest.mark.parametrize("world, drop_last", [(1, True), (3, True)])
def test_stats_world_size_agrees_with_the_loader(tmp_path, capsys, world, drop_last):
    from tokembed.cli import main

    write_shards(tmp_path, counting_docs([[400, 33], [257], [120] * 3]))
    assert (
        main(
            [
                "stats",
                str(tmp_path),
                "--max-length",
                "16",
                "--stride",
                "5",
                "--batch-size",
                "4",
                "--world-size",
                str(world),
                "--json",
            ]
        )
        == 0
    )
    rp = json.loads(capsys.readouterr().out)["splits"]["train"]["rank_plan"]
    for r in range(world):
        loader = tokembed.create_dataloader(
            tmp_path, batch_size=4, max_length=16, stride=5, rank=r, world_size=world, drop_last=drop_last
        )
        batches = list(loader)
        assert rp["batches"] == len(loader) == len(batches)
        assert rp["windows"] == len(loader.dataset)
    assert (
        main(
            [
                "stats",
                str(tmp_path),
                "--max-length",
                "16",
                "--stride",
                "5",
                "--batch-size",
                "4",
                "--world-size",
                str(world),
            ]
        )
        == 0
    )
    assert f"{rp['batches']:,} batches per rank x world_size={world}" in capsys.readouterr().out


def test_stats_world_size_below_one(tmp_path, capsys):
    from tokembed.cli import main

    write_shards(tmp_path, counting_docs([[400]]))
    assert main(["stats", str(tmp_path), "--max-length", "16", "--world-size", "0"]) == 2
    assert "world_size must be >= 1, got 0; the number of ranks" in capsys.readouterr().err


def test_recycled_buffers_never_overwrite_a_batch_still_held():
    # Many chunks of small batches: output buffers are recycled only once no batch refers to them.
    loader = tokembed.create_dataloader(np.arange(300_000), batch_size=4, max_length=8, stride=8, seed=2)
    held = list(loader)  # every batch kept alive
    starts = flat(starts_of(held))
    assert len(starts) == len(set(starts)) == len(loader) * 4
    assert all(torch.equal(x, x[:, :1] + torch.arange(8)) for x, _ in held)  # each row still its own window
    loader.set_epoch(0)
    streamed = [x[:, 0].tolist() for x, _ in loader]  # batches dropped at once: buffers get recycled
    assert streamed == starts_of(held)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(30, 2000),
    b=st.integers(1, 7),
    world=st.integers(1, 3),
    drop_last=st.booleans(),
    shuffle=st.booleans(),
    cut=st.floats(0, 1),
    within=st.booleans(),
)
def test_resume_anywhere_is_exact(n, b, world, drop_last, shuffle, cut, within):
    ids = np.arange(n) % 50000
    ids[::37] = 50256  # documents, for within_documents
    kw = dict(
        batch_size=b,
        max_length=4,
        stride=3,
        shuffle=shuffle,
        drop_last=drop_last,
        rank=world - 1,
        world_size=world,
        within_documents=within,
        seed=7,
    )
    try:
        ref = tokembed.create_dataloader(ids, **kw)
    except ValueError:
        return  # too few windows for one step: covered by the error tests
    expected = [x.tolist() for x, _ in ref]
    k = int(cut * len(expected))
    a = tokembed.create_dataloader(ids, **kw)
    it = iter(a)
    head = [next(it)[0].tolist() for _ in range(k)]
    b2 = tokembed.create_dataloader(ids, **kw)
    b2.load_state_dict(json.loads(json.dumps(a.state_dict())))
    assert head + [x.tolist() for x, _ in b2] == expected


def test_loader_config_is_validated_before_any_work():
    from tokembed.data.loader import LoaderConfig

    with pytest.raises(ValueError, match=r"prefetch_factor=2 needs num_workers >= 1"):
        LoaderConfig(batch_size=4, prefetch_factor=2)
    with pytest.raises(TypeError, match=r"batch_size must be an integer >= 1, got 2.5 \(float\)"):
        LoaderConfig(batch_size=2.5)
    cfg = LoaderConfig(batch_size=4, seed=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.seed = 4
    # A bad option is reported before the text is even tokenized.
    with pytest.raises(ValueError, match=r"rank 3 is outside world_size=2"):
        tokembed.create_dataloader("x" * 10, batch_size=4, max_length=64, rank=3, world_size=2)
    loader = tokembed.WindowLoader(tokembed.SlidingWindowDataset(np.arange(100), max_length=4), cfg)
    assert flat(starts_of(loader)) == flat(
        starts_of(tokembed.create_dataloader(np.arange(100), batch_size=4, max_length=4, seed=3))
    )
