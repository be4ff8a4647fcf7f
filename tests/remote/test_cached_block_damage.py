"""A block damaged on the cache's disk after it was verified is found, removed and fetched again (review2).

A block file that exists was verified when it arrived; a bit flipped on disk later (a failing disk, a stray
write) must not become a wrong batch: each process checks a cached block against the manifest's hash the first
time it uses it.
"""

from __future__ import annotations

import numpy as np
import pytest
from remote_helpers import make_folder, upload

import tokembed

pytestmark = pytest.mark.slow
BLOCK = 1024


def test_a_block_damaged_in_the_cache_is_refetched_not_read(tmp_path, s3):
    local = tmp_path / "local"
    make_folder(local, n_tokens=20_000, n_shards=2, block_bytes=BLOCK)
    url = s3.url("damaged")
    upload(local, url)
    want = tokembed.open_shards(local)
    first = tokembed.open_shards(url, cache_bytes="1MiB")
    assert np.array_equal(first.read(0, first.n_tokens), want.read(0, want.n_tokens))
    cached = sorted(s3.cache.glob("v-*/train/*.bin.*"))
    assert cached
    for path in cached[:3]:  # flipped in place, as a failing disk would
        data = bytearray(path.read_bytes())
        data[7] ^= 0xFF
        path.write_bytes(bytes(data))
    again = tokembed.open_shards(url, cache_bytes="1MiB")  # another process, as a new run or a worker is
    with pytest.warns(UserWarning, match=r"cached block .*train/0000\d\.bin.* damaged on disk"):
        got = again.read(0, again.n_tokens)
    assert np.array_equal(got, want.read(0, want.n_tokens))
    for path in cached[:3]:  # the damaged files were replaced by the right bytes
        name, block = path.name.rsplit(".", 1)
        start = int(block) * BLOCK
        assert path.read_bytes() == (local / "train" / name).read_bytes()[start : start + BLOCK]
