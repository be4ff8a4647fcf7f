"""review13: packed windows materialized from a remote folder are read from the cache's rows, not fetched again."""

from __future__ import annotations

import time

import pytest
import torch

from tokembed import create_dataloader
from tokembed.storage.cache import FolderBlocks

pytestmark = pytest.mark.slow  # a server round trip per block


def test_materialized_remote_packed_windows_fetch_no_block_while_training(tmp_path, corpus, monkeypatch):
    """``materialize=True`` over a remote folder writes the packed windows once into the cache, and batches are read
    from those rows; but the loader still announced each batch's remote blocks (``block_reads``) to the cache's
    prefetch threads, which fetched blocks nothing read: the whole split downloaded again each epoch, evicting what
    the cache held for other reads."""
    local, url = corpus
    kw = dict(batch_size=4, max_length=64, packing="best-fit", seed=3)
    want = [(x.clone(), y.clone()) for x, y in create_dataloader(local, **kw)]
    loader = create_dataloader(url, cache_bytes="40KiB", cache_dir=tmp_path / "cache", materialize=True, **kw)
    fetched: list[tuple[str, int]] = []
    verified = FolderBlocks._verified

    def counting(self, spec, b, span):
        fetched.append((spec.key, b))
        return verified(self, spec, b, span)

    monkeypatch.setattr(FolderBlocks, "_verified", counting)
    got = [(x.clone(), y.clone()) for x, y in loader]
    time.sleep(0.5)  # prefetch threads still running
    assert len(got) == len(want) > 0
    assert all(torch.equal(p, q) for a, b in zip(got, want) for p, q in zip(a, b))
    assert fetched == [], f"{len(fetched)} blocks fetched for batches read from the materialized rows"
