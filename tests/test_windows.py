"""The book's drop-ins: the chapter's numbers, and batch-for-batch equality with the book's code."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

import tokembed
from book_reference import BookGPTDatasetV1, book_create_dataloader_v1


def _batches(loader):
    return [(x.clone(), y.clone()) for x, y in loader]


def _same(a, b):
    assert len(a) == len(b)
    for (xa, ya), (xb, yb) in zip(a, b):
        assert xa.dtype == xb.dtype == torch.int64
        assert torch.equal(xa, xb) and torch.equal(ya, yb)


def test_the_chapters_first_batch(story):
    loader = tokembed.create_dataloader_v1(story, batch_size=8, max_length=4, stride=4, shuffle=False)
    inputs, targets = next(iter(loader))
    assert inputs.shape == targets.shape == (8, 4)
    assert inputs[:2].tolist() == [[40, 367, 2885, 1464], [1807, 3619, 402, 271]]
    assert torch.equal(targets[:, :-1], inputs[:, 1:])
    assert targets[0].tolist() == [367, 2885, 1464, 1807]


def test_story_window_and_batch_counts(story):
    ds = tokembed.GPTDatasetV1(story, tokembed.get_tokenizer(), max_length=4, stride=4)
    assert len(ds.token_ids) == 5145
    assert len(ds) == len(range(0, 5145 - 4, 4)) == 1286
    assert len(tokembed.create_dataloader_v1(story, batch_size=8, max_length=4, stride=4)) == 1286 // 8


PARAMS = [
    dict(batch_size=8, max_length=4, stride=4),
    dict(batch_size=4, max_length=256, stride=128),
    dict(batch_size=3, max_length=7, stride=2),
    dict(batch_size=5, max_length=16, stride=32),
    # one token per window: thousands of batches per text (seconds), so only the whole suite runs it
    pytest.param(dict(batch_size=1, max_length=1, stride=1), marks=pytest.mark.slow),
]


@pytest.mark.parametrize("params", PARAMS, ids=lambda p: "b{batch_size}-L{max_length}-s{stride}".format(**p))
@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("drop_last", [True, False])
def test_same_batches_as_the_book(story, spec_texts, params, shuffle, drop_last):
    for text in [story, *spec_texts]:
        if (
            len(BookGPTDatasetV1(text, tokembed.get_tokenizer(), params["max_length"], params["stride"]))
            < params["batch_size"]
        ):
            continue
        torch.manual_seed(7)
        ours = _batches(tokembed.create_dataloader_v1(text, shuffle=shuffle, drop_last=drop_last, **params))
        after_ours = torch.rand(3)
        torch.manual_seed(7)
        book = _batches(book_create_dataloader_v1(text, shuffle=shuffle, drop_last=drop_last, **params))
        after_book = torch.rand(3)
        _same(ours, book)
        assert torch.equal(after_ours, after_book)  # the global RNG is left where the book leaves it


def test_same_batches_over_two_epochs(story):
    torch.manual_seed(123)
    ours = tokembed.create_dataloader_v1(story, batch_size=8, max_length=4, stride=4)
    a = _batches(ours) + _batches(ours)
    torch.manual_seed(123)
    book = book_create_dataloader_v1(story, batch_size=8, max_length=4, stride=4)
    _same(a, _batches(book) + _batches(book))


def test_dataset_items_and_default_collate(spec_texts):
    enc = tokembed.get_tokenizer()
    ours = tokembed.GPTDatasetV1(spec_texts[3], enc, max_length=5, stride=3)
    book = BookGPTDatasetV1(spec_texts[3], enc, max_length=5, stride=3)
    assert len(ours) == len(book)
    for k in [0, 1, len(book) // 2, len(book) - 1, -1]:
        assert all(torch.equal(a, b) for a, b in zip(ours[k], book[k]))
    # With DataLoader's default collate (as a user passing the dataset to their own loader).
    torch.manual_seed(0)
    a = _batches(DataLoader(ours, batch_size=4, shuffle=True))
    torch.manual_seed(0)
    _same(a, _batches(DataLoader(book, batch_size=4, shuffle=True)))


def test_holds_one_token_array_not_a_tensor_per_window(story):
    ds = tokembed.GPTDatasetV1(story, tokembed.get_tokenizer(), max_length=4, stride=1)
    assert isinstance(ds.token_ids, np.ndarray) and ds.token_ids.dtype == np.uint16
    assert len(pickle.dumps(ds)) < 2 * ds.token_ids.nbytes + 2000  # ~10 KB, where the book's holds 5,141 x 2 tensors


def test_workers_give_the_same_batches(story):
    torch.manual_seed(3)
    ours = _batches(tokembed.create_dataloader_v1(story, batch_size=8, max_length=16, stride=16, num_workers=2))
    torch.manual_seed(3)
    _same(ours, _batches(book_create_dataloader_v1(story, batch_size=8, max_length=16, stride=16, num_workers=2)))


@settings(max_examples=60, deadline=None)
@given(
    text=st.text(min_size=1, max_size=300),
    max_length=st.integers(1, 12),
    stride=st.integers(1, 12),
)
def test_window_properties(text, max_length, stride):
    enc = tokembed.get_tokenizer()
    ids = enc.encode(text, allowed_special={"<|endoftext|>"})
    if len(ids) < max_length + 1:
        with pytest.raises(
            ValueError,
            match=rf"has {len(ids)} tokens, but one window of max_length={max_length} needs at least {max_length + 1}",
        ):
            tokembed.GPTDatasetV1(text, enc, max_length, stride)
        return
    ds = tokembed.GPTDatasetV1(text, enc, max_length, stride)
    assert (
        len(ds) == len(range(0, len(ids) - max_length, stride)) == tokembed.window_count(len(ids), max_length, stride)
    )
    for k in range(len(ds)):
        x, y = ds[k]
        assert x.tolist() == ids[k * stride : k * stride + max_length]
        assert y.tolist() == ids[k * stride + 1 : k * stride + max_length + 1]  # inputs shifted by one


@pytest.mark.parametrize("name", ["max_length", "stride", "batch_size"])
@pytest.mark.parametrize("value", [0, -3])
def test_sizes_below_one(story, name, value):
    kwargs = dict(batch_size=2, max_length=4, stride=4) | {name: value}
    with pytest.raises(ValueError, match=rf"{name} must be >= 1, got {value}"):
        tokembed.create_dataloader_v1(story, **kwargs)


def test_size_of_wrong_type(story):
    with pytest.raises(TypeError, match=r"max_length must be an integer >= 1, got 4.0 \(float\)"):
        tokembed.create_dataloader_v1(story, max_length=4.0)


def test_text_too_short_says_how_many_tokens():
    # The book's version silently gives an empty loader here.
    with pytest.raises(ValueError, match=r"the text has 3 tokens, but one window of max_length=4 needs at least 5"):
        tokembed.create_dataloader_v1("Hello, world", batch_size=1, max_length=4, stride=4)
    assert len(book_create_dataloader_v1("Hello, world", batch_size=1, max_length=4, stride=4, shuffle=False)) == 0


def test_fewer_windows_than_a_batch_with_drop_last():
    text = "one two three four five six seven eight nine ten"
    with pytest.raises(
        ValueError, match=r"gives 2 windows, fewer than batch_size=8, and drop_last=True .* drop_last=False"
    ):
        tokembed.create_dataloader_v1(text, batch_size=8, max_length=4, stride=4)
    ((x, y),) = list(tokembed.create_dataloader_v1(text, batch_size=8, max_length=4, stride=4, drop_last=False))
    assert x.shape == (2, 4)


def test_empty_text():
    with pytest.raises(ValueError, match=r"txt is empty"):
        tokembed.create_dataloader_v1("")


@pytest.mark.parametrize("bad, kind", [(b"bytes", "bytes"), (None, "NoneType"), (["a", "b"], "list")])
def test_text_not_str(bad, kind):
    with pytest.raises(TypeError, match=rf"txt must be a str, got {kind}"):
        tokembed.GPTDatasetV1(bad, tokembed.get_tokenizer(), 4, 4)


def test_index_out_of_range(story):
    ds = tokembed.GPTDatasetV1(story, tokembed.get_tokenizer(), max_length=4, stride=4)
    with pytest.raises(IndexError, match=r"window 1286 is out of range: this dataset has 1286 windows"):
        ds[1286]
