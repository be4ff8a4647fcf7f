"""review10: packed windows over a remote folder read through the bounded block cache, never whole shards."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tokembed import create_dataloader
from tokembed.shards.reader import RemoteShardSet

pytestmark = pytest.mark.slow  # a server round trip per block


def test_packed_remote_windows_read_rows_through_the_cache_not_whole_shards(corpus, tmp_path, monkeypatch):
    """Was: the batches were right, but each gather read every shard its pieces lay in whole (`RemoteShardSet.tokens`)
    and kept it in the process (the row views): the whole split in memory, whatever ``cache_bytes`` said. And the
    blocks announced to the cache (its future order) were those of sliding windows ``k * max_length``, not of the
    packed windows' pieces."""
    local, url = corpus
    kw = dict(batch_size=4, max_length=64, packing="best-fit", seed=3, return_documents=True)
    want = [(b.inputs.clone(), b.targets.clone(), b.cu_seqlens.clone()) for b in create_dataloader(local, **kw)]
    spans: list[int] = []
    read = RemoteShardSet.read

    def recording_read(self, start, stop):
        spans.append(int(stop) - int(start))
        return read(self, start, stop)

    monkeypatch.setattr(RemoteShardSet, "read", recording_read)
    loader = create_dataloader(url, cache_bytes="40KiB", cache_dir=tmp_path / "cache", **kw)
    got = [(b.inputs.clone(), b.targets.clone(), b.cu_seqlens.clone()) for b in loader]
    assert len(got) == len(want) > 0
    assert all(torch.equal(p, q) for x, y in zip(got, want) for p, q in zip(x, y))
    assert max(spans, default=0) <= 65, f"a read of {max(spans)} tokens: a whole shard, not a window's row"
    # The blocks announced for windows k cover every token their pieces (and the token after each) read.
    ds = loader.dataset
    shards = ds._shards
    k = np.arange(len(ds))
    (entry,) = ds.block_reads(k)
    announced = set(zip(entry[1].tolist(), entry[3].tolist(), entry[4].tolist()))  # (window, shard, block)
    p = ds.plan
    for w in k.tolist():
        for i in range(p.window_first[w], p.window_first[w + 1]):
            a = int(p.piece_start[i])
            b = a + int(p.piece_len[i]) + (not p.piece_last[i])  # a piece whose document goes on reads one more
            for g in range(a, min(b, ds.n_tokens)):
                s = int(np.searchsorted(shards.cumulative, g, side="right")) - 1
                block = (g - int(shards.cumulative[s])) // int(shards._tpb[s])
                assert (w, s, block) in announced, (w, g)
