"""A reader is bound to the manifest it opened: a folder prepared again underneath it is an error naming the folder
(issue 24 item 19).

Was: while a loader read a folder, another process ran ``prepare --overwrite`` on it; the same loader went on with
windows of the new corpus, and of both, with no error (shards are mapped lazily, and only their sizes were checked).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import tokembed
from tokembed.cli import main
from tokembed.shards.reader import ShardsChangedError


def corpus(path, seed: int, n: int = 400) -> None:
    rng = np.random.default_rng(seed)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    docs = [" ".join(rng.choice(words, int(rng.integers(20, 200)))) for _ in range(n)]
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs), encoding="utf-8")


def prepare(inputs, out, *extra) -> None:
    # another process, as on a cluster: the real command line
    args = [sys.executable, "-m", "tokembed", "prepare", str(inputs), "--out", str(out), "--shard-mb", "0.01", "-q"]
    subprocess.run([*args, "--workers", "1", *extra], check=True)


@pytest.fixture
def folder(tmp_path):
    corpus(tmp_path / "a.jsonl", 0)
    corpus(tmp_path / "b.jsonl", 1)
    prepare(tmp_path / "a.jsonl", tmp_path / "s")
    assert len(tokembed.open_shards(tmp_path / "s").shards) > 3
    return tmp_path


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 1])
def test_a_loader_fails_naming_the_folder_when_it_is_prepared_again_underneath(folder, workers):
    loader = tokembed.create_dataloader(folder / "s", batch_size=4, max_length=16, shuffle=True, num_workers=workers)
    first = [x for x, _ in loader]  # one whole epoch of the corpus it opened
    prepare(folder / "b.jsonl", folder / "s", "--overwrite")
    loader.set_epoch(1)
    with pytest.raises(ShardsChangedError, match=rf"shard folder {folder / 's'} changed while it was being read"):
        for _ in loader:
            pass
    assert first  # (the first epoch was whole, of one corpus)


def test_a_dataset_fails_on_the_first_shard_it_maps_after_the_change(folder):
    ds = tokembed.SlidingWindowDataset(folder / "s", max_length=16)
    ss = tokembed.open_shards(folder / "s")
    ss.tokens(0)  # mapped before: the old file stays whole under its map
    prepare(folder / "b.jsonl", folder / "s", "--overwrite")
    with pytest.raises(ShardsChangedError, match=r"its manifest.json is not the one this reader opened"):
        ss.tokens(1)
    with pytest.raises(ShardsChangedError, match=r"open it again"):
        ds[len(ds) - 1]
    assert len(tokembed.SlidingWindowDataset(folder / "s", max_length=16)) > 0  # opened again: the new corpus


def test_a_touched_manifest_is_the_same_manifest(folder):
    ss = tokembed.open_shards(folder / "s")
    os.utime(folder / "s" / "manifest.json", ns=(1, 1))  # a backup tool, a copy with -p: same bytes
    assert len(ss.tokens(1)) == ss.shards[1].n_tokens


def test_a_megatron_dataset_exported_again_underneath_is_an_error(folder):
    assert main(["export", str(folder / "s"), "--format", "megatron", str(folder / "m")]) == 0
    prepare(folder / "b.jsonl", folder / "t")
    ss = tokembed.open_shards(folder / "m")
    assert main(["export", str(folder / "t"), "--format", "megatron", str(folder / "m"), "--force"]) == 0
    with pytest.raises(ShardsChangedError, match=rf"Megatron dataset {folder / 'm'} changed while it was being read"):
        ss.tokens(0)
