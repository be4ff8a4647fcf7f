"""The loader takes no argument loosely and reads no damaged index silently (issue 16, items 7 and 9)."""

from __future__ import annotations

import numpy as np
import pytest

import tokembed
from handmade_shards import write_shards
from tokembed.data.windows import SlidingWindowDataset


def test_a_damaged_index_is_named_when_the_documents_are_read(tmp_path):
    """Was: a flipped .idx byte, then within_documents=True: a bare IndexError from gather_rows."""
    rng = np.random.default_rng(0)
    docs = [[list(rng.integers(0, 50000, size=n)) for n in (30, 12, 40)], [list(rng.integers(0, 50000, size=25))]]
    write_shards(tmp_path, docs)
    idx = tmp_path / "train" / "00000.idx"
    original = idx.read_bytes()
    named = 0
    for pos in range(len(original)):
        for bit in (0, 3, 7):
            b = bytearray(original)
            b[pos] ^= 1 << bit
            idx.write_bytes(bytes(b))
            try:
                ds = SlidingWindowDataset(tmp_path, max_length=8, within_documents=True)
            except ValueError as e:  # the only way a damaged index may fail: by name
                assert "train/00000.idx is damaged" in str(e) and "tokembed check" in str(e)
                named += 1
                continue
            x, y = ds.gather(np.arange(len(ds)))  # an index that still looks valid reads inside the shards
            assert x.shape == (len(ds), 8)
    assert named > len(original)  # most flips make the index invalid
    idx.write_bytes(original)
    assert len(SlidingWindowDataset(tmp_path, max_length=8, within_documents=True)) > 0


TOKENS = np.arange(1, 200, dtype=np.int64)


@pytest.mark.parametrize("name, value", [("shuffle", "no"), ("drop_last", "False"), ("pin_memory", 1)])
def test_boolean_options_must_be_booleans(name, value):
    """Was: shuffle="no" and drop_last="False" were taken as True."""
    with pytest.raises(TypeError, match=rf"{name} must be True or False, got"):
        tokembed.create_dataloader(TOKENS, batch_size=2, max_length=4, **{name: value})
    with pytest.raises(TypeError, match="within_documents must be True or False"):
        SlidingWindowDataset(TOKENS, max_length=4, within_documents="yes")


def test_options_that_do_not_apply_are_errors(tmp_path):
    """Was: split= was silently ignored for arrays."""
    with pytest.raises(ValueError, match=r"split='val' does not apply to a token array; leave it out"):
        tokembed.create_dataloader(TOKENS, batch_size=2, max_length=4, split="val")
    with pytest.raises(ValueError, match=r"verify=True does not apply to a text"):
        SlidingWindowDataset(text="a few words of text " * 20, max_length=4, verify=True)
    write_shards(tmp_path, [[list(range(1, 60))]])
    with pytest.raises(ValueError, match=r"eot_token=7 does not apply to a shard folder"):
        SlidingWindowDataset(tmp_path, max_length=4, eot_token=7)
    ds = SlidingWindowDataset(tmp_path, max_length=4)
    with pytest.raises(ValueError, match=r"within_documents=True applies when create_dataloader builds the dataset"):
        tokembed.create_dataloader(ds, batch_size=2, within_documents=True)


def test_ids_that_do_not_fit_int64_are_refused():
    """Was: uint64 ids >= 2**63 wrapped to negative ids in the batches."""
    ids = np.array([1, 2, 3, 2**63 + 5, 4, 5, 6], dtype=np.uint64)
    with pytest.raises(ValueError, match=rf"token id {2**63 + 5} does not fit int64"):
        SlidingWindowDataset(ids, max_length=2)
    ok = SlidingWindowDataset(np.array([1, 2, 3, 2**62, 4], dtype=np.uint64), max_length=2)
    assert ok.gather([1])[0].tolist() == [[3, 2**62]]  # the largest ids that fit come through exactly


def test_a_window_index_must_be_an_integer():
    """Was: ds[[0, 1]] returned one row of 5 tokens."""
    ds = SlidingWindowDataset(TOKENS, max_length=4)
    with pytest.raises(TypeError, match=r"a window index must be an int, got \[0, 1\]; use dataset.gather"):
        ds[[0, 1]]
    assert ds[np.int64(1)][0].tolist() == TOKENS[4:8].tolist()  # numpy integers are integers
    x, _ = ds.gather([0, 1])
    assert x.tolist() == [TOKENS[0:4].tolist(), TOKENS[4:8].tolist()]


@pytest.mark.parametrize("path", ["data/no-such-shards", "shards.bin", "corpus.txt"])
def test_a_str_that_looks_like_a_missing_path_is_not_tokenized(path):
    """Was: a mistyped folder path given as str was tokenized: 4 batches of the path's own tokens."""
    with pytest.raises(ValueError, match=rf"if you meant a shard folder, '{path}' does not exist .*text='{path}'"):
        tokembed.create_dataloader(path, batch_size=1, max_length=2)
    ds = SlidingWindowDataset(text=path, max_length=2)  # the string itself, when that is what is meant
    assert ds.source_kind == "text" and len(ds) > 0


def test_a_str_naming_a_file_is_refused(tmp_path):
    (tmp_path / "a.txt").write_text("some words in a file " * 10)
    with pytest.raises(ValueError, match=r"is a file, not a shard folder; .*text=Path\("):
        SlidingWindowDataset(str(tmp_path / "a.txt"), max_length=4)
    assert len(SlidingWindowDataset("plain words of a text " * 5, max_length=4)) > 0  # texts still work
