"""Batches from a remote folder (Swift on loopback) equal the local folder's, bit for bit, with resume."""

from __future__ import annotations

import pytest
import torch
from remote_helpers import make_folder

from tokembed import Mixture, create_dataloader

pytestmark = pytest.mark.slow  # a server round trip per block


def _all(loader) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(x.clone(), y.clone()) for x, y in loader]


def _same(a, b) -> None:
    assert len(a) == len(b) > 0
    for (x1, y1), (x2, y2) in zip(a, b):
        assert torch.equal(x1, x2) and torch.equal(y1, y2)


@pytest.mark.parametrize(
    "options",
    [
        dict(shuffle=True, seed=3),
        dict(shuffle=False),
        dict(shuffle=True, within_documents=True, stride=32),
        dict(shuffle=True, drop_last=False, batch_size=7),
    ],
)
def test_remote_batches_equal_local_ones(corpus, options):
    local, url = corpus
    kw = dict(batch_size=4, max_length=64) | options
    _same(_all(create_dataloader(local, **kw)), _all(create_dataloader(url, cache_bytes="40KiB", **kw)))


def test_ranks_and_workers_read_the_local_batches(corpus):
    local, url = corpus
    for rank in range(2):
        kw = dict(batch_size=4, max_length=64, rank=rank, world_size=2, seed=1)
        want = _all(create_dataloader(local, **kw))
        _same(want, _all(create_dataloader(url, num_workers=2, cache_bytes="32KiB", **kw)))


def test_a_mixture_of_remote_and_local_sources(corpus, tmp_path):
    local, url = corpus
    other = tmp_path / "other"
    make_folder(other, n_tokens=20_000, n_shards=2, seed=5)
    kw = dict(batch_size=4, max_length=64, seed=2)
    want = _all(create_dataloader(Mixture({local: 0.7, other: 0.3}, seed=4), **kw))
    got = _all(create_dataloader(Mixture({url: 0.7, other: 0.3}, seed=4, cache_bytes="64KiB"), **kw))
    _same(want, got)


def test_resume_and_elastic_resume_from_a_remote_folder(corpus):
    local, url = corpus
    kw = dict(max_length=64, global_batch_size=8, seed=7)
    whole = _all(create_dataloader(local, **kw))
    loader = create_dataloader(url, cache_bytes="48KiB", **kw)
    it = iter(loader)
    head = [next(it) for _ in range(5)]
    state = loader.state_dict()
    _same(whole[:5], head)
    again = create_dataloader(url, cache_bytes="48KiB", **kw)
    again.load_state_dict(state)
    _same(whole[5:], _all(again))
    # elastic: two ranks of 4 windows each go on from the one-rank state, together reading the same windows
    parts = []
    for rank in range(2):
        r = create_dataloader(url, rank=rank, world_size=2, cache_bytes="48KiB", **kw)
        r.load_state_dict(state)
        parts.append(_all(r))
    joined = [(torch.cat([a[0], b[0]]), torch.cat([a[1], b[1]])) for a, b in zip(*parts)]
    _same(whole[5:], joined)
