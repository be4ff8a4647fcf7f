"""review14: the remote cache's bound under long reads, and an endpoint that never answers."""

from __future__ import annotations

import numpy as np
import pytest
from remote_helpers import cache_bytes, make_folder, upload

import tokembed
from tokembed.storage.cache import FolderBlocks

pytestmark = pytest.mark.slow  # a server round trip per block

BLOCK = 4096


def test_a_long_read_of_a_remote_split_keeps_the_cache_within_its_bound(tmp_path, s3, monkeypatch):
    """``RemoteShardSet.read`` (a validation split read whole, ``tokens(i)`` for export and counts) held every block
    of the range in use until the whole range was copied: a cache of 16 KiB grew to the whole split on disk."""
    local = tmp_path / "local"
    make_folder(local, n_tokens=60_000, n_shards=2, block_bytes=BLOCK)
    url = s3.url("long")
    upload(local, url)
    bound = 4 * BLOCK
    ss = tokembed.open_shards(url, cache_dir=s3.cache, cache_bytes=bound)
    seen: list[int] = []
    fill = FolderBlocks._fill

    def measuring(self, *args, **kwargs):
        fill(self, *args, **kwargs)
        seen.append(cache_bytes(s3.cache))

    monkeypatch.setattr(FolderBlocks, "_fill", measuring)
    want = tokembed.open_shards(local)
    assert np.array_equal(ss.read(0, ss.n_tokens), want.read(0, want.n_tokens))
    assert np.array_equal(ss.tokens(1), want.tokens(1))
    assert len(seen) > 2 * bound // BLOCK  # the split is much larger than the cache
    # the bound plus the blocks in use: the one being copied and the one just fetched
    assert max(seen) <= bound + 2 * BLOCK, f"the cache held {max(seen)} bytes, bound {bound}"
    assert cache_bytes(s3.cache) <= bound + 2 * BLOCK
