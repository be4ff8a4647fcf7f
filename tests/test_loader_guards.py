"""The loader takes no argument loosely and reads no damaged index silently (issue 16, items 7 and 9)."""

from __future__ import annotations

import numpy as np

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
