"""The locality option (``shuffle_group``): an order of groups of windows, shuffled within each group. Every
epoch stays a permutation, resume stays exact and elastic, and a remote folder read through a cache a quarter
of its size fetches each block about once per epoch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from remote_helpers import make_folder, upload

import tokembed
from tokembed.data.shuffle import GroupedPermutation


@given(n=st.integers(1, 3000), group=st.integers(1, 400), seed=st.integers(0, 2**32), epoch=st.integers(0, 5))
def test_every_epoch_is_a_permutation_visiting_whole_groups(n, group, seed, epoch):
    perm = GroupedPermutation(n, group, seed=seed, epoch=epoch)
    out = perm(np.arange(n))
    assert np.array_equal(np.sort(out), np.arange(n))  # every window once
    groups = out // group
    assert np.count_nonzero(np.diff(groups)) == perm.n_groups - 1  # each group's windows come together
    assert np.array_equal(perm(np.arange(n).reshape(-1, 1)).ravel(), out)  # any shape, the same answer


def test_the_order_changes_with_seed_and_epoch_and_shuffles_within_groups():
    a = GroupedPermutation(10_000, 100, seed=1, epoch=0)(np.arange(10_000))
    b = GroupedPermutation(10_000, 100, seed=1, epoch=1)(np.arange(10_000))
    c = GroupedPermutation(10_000, 100, seed=2, epoch=0)(np.arange(10_000))
    assert not np.array_equal(a, b) and not np.array_equal(a, c)
    first = a[:100]
    assert not np.array_equal(first, np.sort(first))  # shuffled within the group


def test_shuffle_group_needs_shuffle():
    with pytest.raises(ValueError, match=r"shuffle_group=8 shuffles groups of windows: it needs shuffle=True"):
        tokembed.create_dataloader(np.arange(1000), batch_size=2, max_length=8, shuffle=False, shuffle_group=8)


def test_locality_keeps_exact_and_elastic_resume(tmp_path):
    make_folder(tmp_path / "f", n_tokens=30_000, n_shards=3)
    kw = dict(max_length=32, global_batch_size=8, seed=4, shuffle_group=40)
    whole = [x.clone() for x, _ in tokembed.create_dataloader(tmp_path / "f", **kw)]
    seen = torch.cat(whole)[:, 0]
    assert len(whole) == len(tokembed.create_dataloader(tmp_path / "f", **kw))
    loader = tokembed.create_dataloader(tmp_path / "f", **kw)
    it = iter(loader)
    for _ in range(7):
        next(it)
    state = loader.state_dict()
    parts = []
    for rank in range(2):
        r = tokembed.create_dataloader(tmp_path / "f", rank=rank, world_size=2, **kw)
        r.load_state_dict(state)
        parts.append([x for x, _ in r])
    joined = [torch.cat([a, b]) for a, b in zip(*parts)]
    assert all(torch.equal(a, b) for a, b in zip(whole[7:], joined))
    assert len(set(seen.tolist())) > 0.9 * len(seen)  # windows, not repeats
    other = tokembed.create_dataloader(tmp_path / "f", max_length=32, global_batch_size=8, seed=4)
    with pytest.raises(ValueError, match=r"shuffle_group=40 \(this loader: None\)"):
        other.load_state_dict(state)


@pytest.mark.slow
def test_a_quarter_cache_with_locality_fetches_each_block_about_once(tmp_path, s3, monkeypatch):
    local = tmp_path / "f"
    make_folder(local, n_tokens=80_000, n_shards=4, block_bytes=2048)
    url = s3.url("loc")
    upload(local, url)
    corpus = sum(p.stat().st_size for p in local.glob("train/*.bin"))
    cache = corpus // 4
    group = cache // 4 // (2 * 64)  # windows whose tokens fill a quarter of the cache
    fetched = {}
    for name, extra in (("locality", {"shuffle_group": group}), ("full shuffle", {})):
        log = tmp_path / f"{name}.log"
        monkeypatch.setenv("TOKEMBED_CACHE_LOG", str(log))
        kw = dict(batch_size=8, max_length=63, stride=64, seed=2, cache_bytes=cache, **extra)
        got = [x for x, _ in tokembed.create_dataloader(url, cache_dir=tmp_path / name, **kw)]
        want = [x for x, _ in tokembed.create_dataloader(local, **kw)]
        assert all(torch.equal(a, b) for a, b in zip(got, want))
        fetched[name] = sum(int(line.split()[3]) for line in log.read_text().splitlines() if ".bin" in line)
    assert fetched["locality"] <= 1.3 * corpus < 2 * corpus < fetched["full shuffle"]
