"""Packing whole documents into windows (``packing="best-fit"``).

Checked against definitions, not against the code itself: the packers against plain O(n^2) versions
written from their textbook statements; the loader's packed epochs by properties (every document's
tokens exactly once per epoch, none cut unless longer than a window, the targets the next token of the
same document, padding no worse than first-fit), and resume by comparing with the uninterrupted run.
The tokens count up through the stream (``write_cut_stream``), so each token says where it came from.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tokembed
from handmade_shards import EOT, write_cut_stream
from tokembed.data.batch import IGNORE_INDEX
from tokembed.data.packed import PackedWindows
from tokembed.data.packing import PACKERS, best_fit_decreasing, first_fit, plan_packing
from tokembed.data.stats import shard_stats


def bfd_reference(lengths, capacity):
    """Best-fit decreasing as textbooks state it: longest first (ties: earlier), each into the open bin
    with the least room that still fits (ties: any), else a new bin. Returns the bins' loads."""
    loads: list[int] = []
    for size in sorted(lengths, reverse=True):
        fits = [i for i, load in enumerate(loads) if load + size <= capacity]
        if fits:
            best = min(fits, key=lambda i: capacity - loads[i])
            loads[best] += size
        else:
            loads.append(size)
    return sorted(loads)


def ff_reference(lengths, capacity):
    """First-fit: items in order, each into the first open bin it fits. Returns each item's bin."""
    loads: list[int] = []
    out = []
    for size in lengths:
        for i, load in enumerate(loads):
            if load + size <= capacity:
                loads[i] += size
                out.append(i)
                break
        else:
            loads.append(size)
            out.append(len(loads) - 1)
    return out


def loads_of(bins, lengths):
    return sorted(np.bincount(bins, weights=lengths).astype(int).tolist())


@settings(max_examples=80)
@given(capacity=st.integers(1, 64), data=st.data())
def test_packers_agree_with_their_definitions(capacity, data):
    lengths = data.draw(st.lists(st.integers(1, capacity), max_size=120))
    arr = np.asarray(lengths, dtype=np.int64)
    # Best-fit's ties between equally full bins may go either way: the loads are what it defines.
    assert loads_of(best_fit_decreasing(arr, capacity), arr) == bfd_reference(lengths, capacity)
    assert first_fit(arr, capacity).tolist() == ff_reference(lengths, capacity)
    for packer in PACKERS.values():
        bins = packer(arr, capacity)
        assert (np.bincount(bins, weights=arr) <= capacity).all() if len(arr) else True
        assert sorted(set(bins.tolist())) == list(range(len(set(bins.tolist()))))  # bins numbered 0, 1, ...


@pytest.mark.parametrize("seed", range(6))
def test_best_fit_pads_no_more_than_first_fit(seed):
    rng = np.random.default_rng(seed)
    # Heavy-tailed lengths, as in web text: many short documents, a few longer than a window.
    lengths = np.minimum(rng.lognormal(5.0, 1.0, size=3000).astype(np.int64) + 1, 5000)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    best = plan_packing(starts, int(lengths.sum()), max_length=512, packer="best-fit")
    first = plan_packing(starts, int(lengths.sum()), max_length=512, packer="first-fit")
    assert best.padding_tokens <= first.padding_tokens
    assert 0 <= best.stats()["padding_share"] < first.stats()["padding_share"]
    for plan in (best, first):
        assert plan.stats()["padding_share"] == pytest.approx(plan.padding_tokens / (plan.n_windows * 512))
        assert plan.cut_documents == int((lengths > 512).sum())


def counting(lengths):
    docs, pos = [], 0
    for n in lengths:
        docs.append(list(range(pos, pos + n)))
        pos += n + 1
    return docs


@pytest.fixture
def folder(tmp_path):
    rng = np.random.default_rng(11)
    lengths = np.concatenate([rng.integers(1, 30, 150), [70, 100, 31]])  # three documents longer than a window
    rng.shuffle(lengths)
    docs = counting(lengths.tolist())
    stream, starts = write_cut_stream(tmp_path, docs, cuts=[400, 1200, 1201, 2500])  # documents cross shards
    return tmp_path, stream, starts, docs


def check_epoch(batches, stream, starts, t, padding):
    """Every document's tokens exactly once; a document of <= T tokens whole in one row; targets right.

    A segment with a token other than the separator is located in the stream by it (tokens count up); a
    segment of separators only is the padding or a document's last token alone (a remainder of one):
    together they hold the ``padding`` slots and the stream's separators no other segment holds.
    """
    seen = np.zeros(len(stream), dtype=np.int64)
    ends = np.append(starts[1:], len(stream))
    separators_only = 0
    for b in batches:
        assert b.inputs.shape[1] == t
        for x, y, lens in zip(b.inputs.tolist(), b.targets.tolist(), b.doc_lens.tolist()):
            at = 0
            for n in (n for n in lens if n):
                piece, target = x[at : at + n], y[at : at + n]
                at += n
                if all(v == EOT for v in piece):
                    assert target == [IGNORE_INDEX] * n
                    separators_only += n
                    continue
                first = next(v for v in piece if v != EOT)
                g = first - piece.index(first)  # the piece's first token in the stream
                d = int(np.searchsorted(starts, g, side="right")) - 1
                assert piece == stream[g : g + n].tolist(), "a piece is a contiguous part of the stream"
                assert g + n <= ends[d], "... inside one document"
                if ends[d] - starts[d] <= t:
                    assert (g, n) == (starts[d], ends[d] - starts[d]), "a document that fits is never cut"
                assert target == [stream[g + i + 1] if g + i + 1 < ends[d] else IGNORE_INDEX for i in range(n)]
                seen[g : g + n] += 1
    assert seen.max() == 1 and (stream[seen == 0] == EOT).all(), "every token at most once, every other token seen"
    assert separators_only == int((seen == 0).sum()) + padding, "... and the rest is padding"


@pytest.mark.parametrize("t", [32, 17])
def test_a_packed_epoch_holds_every_document_once_and_cuts_only_long_ones(folder, t):
    root, stream, starts, docs = folder
    ds = PackedWindows(root, max_length=t)
    loader = tokembed.create_dataloader(ds, batch_size=1, seed=4, return_documents=True)
    batches = list(loader)
    assert len(batches) == len(ds) == ds.plan.n_windows
    check_epoch(batches, stream, starts, t, ds.plan.padding_tokens)
    # Padding as the plan reports it.
    padded = sum(int((b.targets == IGNORE_INDEX).sum()) for b in batches) - len(docs)
    assert padded == ds.plan.padding_tokens == len(ds) * t - len(stream)


def test_packing_is_deterministic_and_the_seed_orders_the_windows(folder):
    root, *_ = folder
    kw = dict(batch_size=1, max_length=32, packing="best-fit")  # batch 1: no tail is dropped
    a = [x for x, _ in tokembed.create_dataloader(root, seed=1, **kw)]
    b = [x for x, _ in tokembed.create_dataloader(root, seed=1, **kw)]
    c = [x for x, _ in tokembed.create_dataloader(root, seed=2, **kw)]
    assert all(torch.equal(p, q) for p, q in zip(a, b, strict=True))
    assert not all(torch.equal(p, q) for p, q in zip(a, c))
    rows = lambda bs: sorted(tuple(r) for x in bs for r in x.tolist())  # noqa: E731
    assert rows(a) == rows(c)  # the same windows, in another order


def test_packed_loader_resumes_exactly_and_elastically(folder):
    root, *_ = folder
    kw = dict(max_length=16, packing="best-fit", seed=5, drop_last=True)
    full = [x for x, _ in tokembed.create_dataloader(root, batch_size=4, **kw)]
    loader = tokembed.create_dataloader(root, batch_size=4, **kw)
    it = iter(loader)
    head = [next(it)[0] for _ in range(3)]
    state = loader.state_dict()
    assert state["config"]["packing"] == "best-fit"
    again = tokembed.create_dataloader(root, batch_size=4, **kw)
    again.load_state_dict(state)
    assert all(torch.equal(p, q) for p, q in zip(head + [x for x, _ in again], full, strict=True))
    # Elastic: the same global batch of 4 over 2 ranks of 2 reads what 1 rank would have read next.
    ranks = [tokembed.create_dataloader(root, global_batch_size=4, rank=r, world_size=2, **kw) for r in range(2)]
    for r in ranks:
        r.load_state_dict(state)
    merged = [torch.cat([x for x, _ in pair]) for pair in zip(*ranks)]
    assert all(torch.equal(p, q) for p, q in zip(merged, full[3:], strict=True))
    # A state from plain windows is not a packed loader's.
    plain = tokembed.create_dataloader(root, batch_size=4, max_length=16, seed=5)
    with pytest.raises(ValueError, match=r"packing=None \(this loader: 'best-fit'\)"):
        tokembed.create_dataloader(root, batch_size=4, **kw).load_state_dict(plain.state_dict())


def test_packing_works_with_workers(folder):
    root, *_ = folder
    kw = dict(batch_size=3, max_length=32, packing="best-fit", seed=8, return_documents=True)
    one = list(tokembed.create_dataloader(root, **kw))
    two = list(tokembed.create_dataloader(root, num_workers=2, **kw))
    assert all(
        torch.equal(a.inputs, b.inputs) and torch.equal(a.cu_seqlens, b.cu_seqlens)
        for a, b in zip(one, two, strict=True)
    )


@pytest.mark.parametrize("materialize", [None, False], ids=["default", "gathered"])
def test_packing_with_a_mixture_draws_packed_windows_in_proportion(tmp_path, materialize, monkeypatch):
    monkeypatch.setattr("tokembed.data.loader._CHUNK_TOKENS", 3 * 8 * 32)  # tokens gathered 3 batches at a time
    rng = np.random.default_rng(3)
    ra, rb = tmp_path / "a", tmp_path / "b"
    sa, starts_a = write_cut_stream(ra, counting(rng.integers(1, 25, 200).tolist()), cuts=[1000])
    docs_b = [[v + 20000 for v in d] for d in counting(rng.integers(1, 25, 200).tolist())]
    sb, starts_b = write_cut_stream(rb, docs_b, cuts=[700])
    mix = tokembed.Mixture({ra: 0.75, rb: 0.25}, seed=1)
    kw = dict(batch_size=8, max_length=32, packing="best-fit", return_documents=True, materialize=materialize)
    loader = tokembed.create_dataloader(mix, **kw)
    assert all(s.materialize is (materialize is None) for s in loader.dataset.sources)
    windows = {
        name: {
            tuple(PackedWindows(r, max_length=32)[k][0].tolist()) for k in range(len(PackedWindows(r, max_length=32)))
        }
        for name, r in (("a", ra), ("b", rb))
    }
    # Each row's metadata is its window's as one folder gives it (checked against the plan in test_documents.py).
    single = {}
    for r in (ra, rb):
        ds = PackedWindows(r, max_length=32)
        for k in range(len(ds)):
            one = ds._gather_documents(np.array([k]))
            single[tuple(one.inputs[0].tolist())] = one
    counts = {"a": 0, "b": 0}
    for b in loader:
        starts = []
        for i, x in enumerate(b.inputs.tolist()):
            name = "b" if max(x) >= 20000 and max(v for v in x if v != EOT) >= 20000 else "a"
            assert tuple(x) in windows[name], "each row is one of its source's packed windows"
            counts[name] += 1
            one = single[tuple(x)]
            assert torch.equal(b.targets[i], one.targets[0]) and torch.equal(b.position_ids[i], one.position_ids[0])
            lens = b.doc_lens[i][b.doc_lens[i] > 0]
            assert torch.equal(lens, one.doc_lens[0][one.doc_lens[0] > 0])
            starts += (i * 32 + one.cu_seqlens[:-1]).tolist()
        assert b.cu_seqlens.tolist() == [*starts, 8 * 32] and b.max_seqlen == int(b.doc_lens.max())
    total = counts["a"] + counts["b"]
    assert abs(counts["a"] - 0.75 * total) < 1  # the mixture's quota bound
    # resume in the middle of a mixture of packed windows
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    rest = [b.inputs for b in it]
    again = tokembed.create_dataloader(mix, **kw)
    again.load_state_dict(state)
    assert all(torch.equal(a.inputs, r) for a, r in zip(again, rest, strict=True))
    assert sa.size and sb.size and len(starts_a) and len(starts_b)


def test_stats_report_the_padding_share(folder):
    root, stream, starts, _ = folder
    stats = shard_stats(root, max_length=32, packing="best-fit")
    pk = stats["splits"]["train"]["packing"]
    plan = plan_packing(starts, len(stream), max_length=32, packer="first-fit")
    assert pk["packer"] == "best-fit" and pk["tokens"] == len(stream) and pk["documents"] == len(starts)
    assert pk["padding_tokens"] == pk["windows"] * 32 - len(stream)
    assert pk["padding_tokens"] <= plan.padding_tokens
    assert pk["padding_share"] == pytest.approx(pk["padding_tokens"] / (pk["windows"] * 32))


def test_packing_errors(folder):
    root, *_ = folder
    with pytest.raises(ValueError, match=r"packing must be one of 'best-fit', 'first-fit', got 'tight'"):
        tokembed.create_dataloader(root, batch_size=2, max_length=8, packing="tight")
    with pytest.raises(ValueError, match=r"stride does not apply to packed windows"):
        tokembed.create_dataloader(root, batch_size=2, max_length=8, stride=4, packing="best-fit")
    with pytest.raises(ValueError, match=r"packed windows are not rows of the stream .*use output='pairs'"):
        tokembed.create_dataloader(root, batch_size=2, max_length=8, packing="best-fit", output="rows")  # made: refused
    mix = tokembed.Mixture({root: 1.0})
    with pytest.raises(ValueError, match=r"packed windows are not rows of the stream"):
        tokembed.create_dataloader(mix, batch_size=2, max_length=8, packing="best-fit", output="rows")
    rows = tokembed.create_dataloader(mix, batch_size=2, max_length=8, output="rows")  # unpacked: rows of the stream
    assert next(iter(rows)).shape == (2, 9)
    ds = PackedWindows(root, max_length=8)
    with pytest.raises(ValueError, match=r"packing='first-fit' differs from the dataset's packing='best-fit'"):
        tokembed.create_dataloader(ds, batch_size=2, packing="first-fit")


def test_stats_cli_prints_the_padding(folder, capsys):
    from tokembed.cli import main

    root, *_ = folder
    assert main(["stats", str(root), "--max-length", "32", "--packing", "best-fit"]) == 0
    out = capsys.readouterr().out
    assert re.search(
        r"train packed \(best-fit\): [\d,]+ windows, [\d,]+ padding tokens \(\d+\.\d\d%\), 2 documents longer than a window cut",
        out,
    ), out
    assert main(["stats", str(root), "--packing", "tight"]) != 0
    assert "packing must be one of 'best-fit', 'first-fit', got 'tight'" in capsys.readouterr().err
