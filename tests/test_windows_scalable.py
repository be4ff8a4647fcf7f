"""SlidingWindowDataset: the chapter's windows, computed on demand over shards, arrays and texts.

References are written here from the definition (``range(0, N - L, stride)`` over the concatenated
stream; per document with ``within_documents``) and from the book's own dataset.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tokembed
from book_reference import BookGPTDatasetV1
from handmade_shards import EOT, counting_docs, write_shards


def reference_windows(stream: np.ndarray, max_length: int, stride: int) -> list[tuple[list[int], list[int]]]:
    ids = [int(t) for t in stream]
    return [(ids[i : i + max_length], ids[i + 1 : i + max_length + 1]) for i in range(0, len(ids) - max_length, stride)]


def reference_document_windows(stream: np.ndarray, doc_starts: list[int], max_length: int, stride: int):
    """Per document (tokens + separator), the book's windows; and the tokens no window touches."""
    ends = [*doc_starts[1:], len(stream)]
    windows, covered = [], np.zeros(len(stream), bool)
    for a, b in zip(doc_starts, ends):
        for x, y in reference_windows(stream[a:b], max_length, stride):
            windows.append((x, y))
        for i in range(0, (b - a) - max_length, stride):
            covered[a + i : a + i + max_length + 1] = True
    return windows, int((~covered).sum())


def all_windows(ds) -> list[tuple[list[int], list[int]]]:
    x, y = ds.gather(np.arange(len(ds)))
    return list(zip(x.tolist(), y.tolist()))


def test_the_story_gives_the_books_windows(story):
    enc = tokembed.get_tokenizer()
    for max_length, stride in [(4, 4), (256, 128), (7, 3)]:
        book = BookGPTDatasetV1(story, enc, max_length, stride)
        ours = tokembed.SlidingWindowDataset(story, max_length=max_length, stride=stride)
        assert len(ours) == len(book)
        x, y = ours.gather(np.arange(len(ours)))  # (N,T), (N,T)
        assert x.dtype == y.dtype == torch.int64 and x.shape == (len(book), max_length)
        assert torch.equal(x, torch.stack(book.input_ids)) and torch.equal(y, torch.stack(book.target_ids))
        for k in [0, len(book) // 3, len(book) - 1]:
            assert all(torch.equal(a, b) for a, b in zip(ours[k], book[k]))


@settings(max_examples=80, deadline=None)
@given(
    n=st.integers(2, 300),
    max_length=st.integers(1, 20),
    stride=st.integers(1, 25),
    kind=st.sampled_from(["numpy", "torch", "list"]),
)
def test_token_array_windows_match_the_definition(n, max_length, stride, kind):
    ids = np.random.default_rng(n).integers(0, 50257, n)
    source = {"numpy": ids.astype(np.uint16), "torch": torch.from_numpy(ids), "list": ids.tolist()}[kind]
    if n < max_length + 1:
        with pytest.raises(
            ValueError,
            match=rf"has {n} tokens, but one window of max_length={max_length} needs at least {max_length + 1}",
        ):
            tokembed.SlidingWindowDataset(source, max_length=max_length, stride=stride)
        return
    ds = tokembed.SlidingWindowDataset(source, max_length=max_length, stride=stride)
    assert all_windows(ds) == reference_windows(ids, max_length, stride)
    last = (len(ds) - 1) * stride + max_length + 1  # one past the last target
    reached = np.zeros(n, bool)
    for i in range(0, n - max_length, stride):
        reached[i : i + max_length + 1] = True
    assert ds.dropped_tokens == int((~reached).sum()) and last <= n


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lengths=st.lists(st.lists(st.integers(1, 30), min_size=0, max_size=4), min_size=1, max_size=5),
    max_length=st.integers(1, 12),
    stride=st.integers(1, 14),
)
def test_shard_windows_cross_shard_boundaries_like_one_stream(tmp_path_factory, lengths, max_length, stride):
    root = tmp_path_factory.mktemp("shards")
    stream = write_shards(root, counting_docs(lengths))
    if len(stream) < max_length + 1:
        with pytest.raises(
            ValueError, match=rf"shard folder .* has {len(stream)} tokens, but one window of max_length={max_length}"
        ):
            tokembed.SlidingWindowDataset(root, max_length=max_length, stride=stride)
        return
    ds = tokembed.SlidingWindowDataset(root, max_length=max_length, stride=stride)
    assert ds.n_tokens == len(stream)
    assert all_windows(ds) == reference_windows(stream, max_length, stride)
    # Any batch, in any order, equals the windows one by one.
    k = np.random.default_rng(0).permutation(len(ds))[:7]
    x, y = ds.gather(k)
    assert [(a.tolist(), b.tolist()) for a, b in zip(x, y)] == [tuple(t.tolist() for t in ds[int(i)]) for i in k]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lengths=st.lists(st.lists(st.integers(1, 25), min_size=1, max_size=4), min_size=1, max_size=4),
    max_length=st.integers(1, 10),
    stride=st.integers(1, 13),
)
def test_within_documents_never_crosses_a_document(tmp_path_factory, lengths, max_length, stride):
    root = tmp_path_factory.mktemp("docs")
    stream = write_shards(root, counting_docs(lengths))
    doc_starts = np.concatenate([[0], np.flatnonzero(stream == EOT)[:-1] + 1]).tolist()
    expected, dropped = reference_document_windows(stream, doc_starts, max_length, stride)
    if not expected:
        with pytest.raises(
            ValueError, match=rf"no document of at least {max_length + 1} tokens .* within_documents=False"
        ):
            tokembed.SlidingWindowDataset(root, max_length=max_length, stride=stride, within_documents=True)
        return
    ds = tokembed.SlidingWindowDataset(root, max_length=max_length, stride=stride, within_documents=True)
    assert all_windows(ds) == expected
    assert ds.dropped_tokens == dropped
    for x, y in all_windows(ds):
        assert EOT not in x[:-1] and EOT not in y[:-1]  # a separator can only end a window
    # The same stream as an array: documents are found from the separators, same windows.
    arr = tokembed.SlidingWindowDataset(
        stream.astype(np.uint16), max_length=max_length, stride=stride, within_documents=True
    )
    assert all_windows(arr) == expected and arr.dropped_tokens == dropped


def test_text_with_documents_uses_the_separator(story):
    text = story[:3000] + "<|endoftext|>" + story[3000:6000]
    ds = tokembed.SlidingWindowDataset(text, max_length=16, stride=16, within_documents=True)
    ids = tokembed.get_tokenizer().encode(text, allowed_special={"<|endoftext|>"})
    cut = ids.index(EOT) + 1
    expected, dropped = reference_document_windows(np.array(ids), [0, cut], 16, 16)
    assert all_windows(ds) == expected and ds.dropped_tokens == dropped and ds.n_documents == 2


def test_pickles_paths_not_memory_maps(tmp_path):
    stream = write_shards(tmp_path, counting_docs([[5000] * 4, [3000] * 3]))
    ds = tokembed.SlidingWindowDataset(tmp_path, max_length=64, stride=1)
    ds.gather(np.arange(0, len(ds), 997))  # open the maps
    blob = pickle.dumps(ds)
    assert len(blob) < 4000 < stream.nbytes // 10  # paths and arithmetic: no tokens, no per-window data
    again = pickle.loads(blob)
    assert all_windows(again)[-5:] == reference_windows(stream, 64, 1)[-5:]


def test_a_memmapped_array_is_pickled_as_its_path(tmp_path):
    ids = np.random.default_rng(1).integers(0, 50257, 200_000).astype(np.uint16)
    ids.tofile(tmp_path / "tokens.bin")
    mm = np.memmap(tmp_path / "tokens.bin", dtype=np.uint16, mode="r")
    ds = tokembed.SlidingWindowDataset(mm, max_length=32, stride=7)
    blob = pickle.dumps(ds)
    assert len(blob) < 2000
    assert torch.equal(pickle.loads(blob).gather([5, 9])[0], ds.gather([5, 9])[0])


def test_memory_does_not_grow_with_windows():
    ids = np.arange(200_000) % 50000
    one = len(pickle.dumps(tokembed.SlidingWindowDataset(ids, max_length=8, stride=4096)))
    many = len(pickle.dumps(tokembed.SlidingWindowDataset(ids, max_length=8, stride=1)))  # 4096x the windows
    assert abs(many - one) < 16  # the same few numbers (pickle sizes ints by value)


def test_index_errors(story):
    ds = tokembed.SlidingWindowDataset(story, max_length=4, stride=4)
    assert torch.equal(ds[-1][0], ds[len(ds) - 1][0])
    with pytest.raises(IndexError, match=r"window 1286 is out of range: this dataset has 1286 windows"):
        ds.gather([0, 1286])
    with pytest.raises(IndexError, match=r"window -1287 is out of range"):
        ds[-1287]


@pytest.mark.parametrize("name", ["max_length", "stride"])
@pytest.mark.parametrize("value", [0, -2])
def test_sizes_below_one(story, name, value):
    kwargs = dict(max_length=4, stride=4) | {name: value}
    with pytest.raises(ValueError, match=rf"{name} must be >= 1, got {value}"):
        tokembed.SlidingWindowDataset(story, **kwargs)


def test_max_length_larger_than_the_source(tmp_path, story):
    write_shards(tmp_path, counting_docs([[10, 10]]))
    with pytest.raises(
        ValueError,
        match=r"split 'train' of shard folder .* has 22 tokens, but one window of max_length=64 needs at least 65",
    ):
        tokembed.SlidingWindowDataset(tmp_path, max_length=64)
    with pytest.raises(ValueError, match=r"no document of at least 17 tokens \(the longest has 11\)"):
        tokembed.SlidingWindowDataset(tmp_path, max_length=16, within_documents=True)
    with pytest.raises(
        ValueError, match=r"the token array has 3 tokens, but one window of max_length=3 needs at least 4"
    ):
        tokembed.SlidingWindowDataset(np.array([1, 2, 3]), max_length=3)


def test_a_missing_folder_given_as_str_is_explained():
    with pytest.raises(ValueError, match=r"if you meant a shard folder, 'data/no-such-shards' does not exist"):
        tokembed.SlidingWindowDataset("data/no-such-shards", max_length=64)
    with pytest.raises(FileNotFoundError, match=r"shard folder .*no-such-shards does not exist"):
        tokembed.SlidingWindowDataset(Path("data/no-such-shards"), max_length=64)


@pytest.mark.parametrize(
    "source, error, message",
    [
        (np.ones((4, 4), dtype=np.int64), ValueError, r"a token array must be 1-D \(N,\), got shape \(4, 4\)"),
        (np.ones(40, dtype=np.float32), TypeError, r"a token array must hold integers, got dtype float32"),
        (np.full(40, -1), ValueError, r"token ids must be >= 0, found -1"),
        (3.5, TypeError, r"source must be a shard folder \(a Path\), a 1-D token array or a text \(str\), got float"),
    ],
)
def test_bad_sources(source, error, message):
    with pytest.raises(error, match=message):
        tokembed.SlidingWindowDataset(source, max_length=4)


def test_a_damaged_shard_folder_names_the_shard_and_the_checker(tmp_path):
    write_shards(tmp_path, counting_docs([[100], [100]]))
    bin1 = tmp_path / "train" / "00001.bin"
    bin1.write_bytes(bin1.read_bytes()[:-2])  # one token short
    with pytest.raises(ValueError, match=r"shard train/00001.bin of .* is damaged: .*tokembed check"):
        tokembed.SlidingWindowDataset(tmp_path, max_length=8)
    with pytest.raises(ValueError, match=r"shard train/00001.bin of .* is damaged"):
        tokembed.create_dataloader(tmp_path, batch_size=2, max_length=8)


def test_verify_finds_a_flipped_byte(tmp_path):
    write_shards(tmp_path, counting_docs([[100], [100]]))
    p = tmp_path / "train" / "00000.bin"
    data = bytearray(p.read_bytes())
    data[10] ^= 1
    p.write_bytes(bytes(data))
    tokembed.SlidingWindowDataset(tmp_path, max_length=8)  # sizes are fine: opens without verify
    with pytest.raises(ValueError, match=r"sha256 mismatch.*tokembed check"):
        tokembed.SlidingWindowDataset(tmp_path, max_length=8, verify=True)


def test_val_split_and_unknown_split(tmp_path):
    write_shards(tmp_path, counting_docs([[50]]), split="val")
    ds = tokembed.SlidingWindowDataset(tmp_path, max_length=8, split="val")
    assert len(ds) == len(range(0, 51 - 8, 8))
    with pytest.raises(ValueError, match=r"split 'train' is not in"):
        tokembed.SlidingWindowDataset(tmp_path, max_length=8)


def test_works_in_a_plain_torch_dataloader(story):
    # A user's own DataLoader (default collate): __getitems__ hands whole batches over at once.
    ds = tokembed.SlidingWindowDataset(story, max_length=8, stride=5)
    batches = list(torch.utils.data.DataLoader(ds, batch_size=6, shuffle=False))
    x = torch.cat([b[0] for b in batches])
    y = torch.cat([b[1] for b in batches])
    ref = reference_windows(np.array(tokembed.get_tokenizer().encode(story)), 8, 5)
    assert x.tolist() == [r[0] for r in ref] and y.tolist() == [r[1] for r in ref]
