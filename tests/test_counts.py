"""Token counts travel with the run: what `train` read, what `prepare` wrote, and the one rule inspection follows."""

from __future__ import annotations

import json
import re
from collections import Counter

import numpy as np
import pytest
import torch

import tokembed
from conftest import STORY, TINY
from inspect_helpers import V, planted_table, write_checkpoint
from tokembed import TrainConfig, load_table, train
from tokembed.cli import main
from tokembed.training.counts import COUNTS_FILE, read_token_counts

# The story's first 90% (4,630 tokens) gives (4630 - 17) // 16 + 1 = 289 = 17 * 17 windows of 16 tokens:
# 17 batches of 17 windows read every window exactly once in one epoch.
EPOCH = dict(max_length=16, batch_size=17, max_steps=17, eval_interval=17, eval_batches=1, warmup_steps=2)


def read_once_counts() -> torch.Tensor:
    """The ids one epoch reads, from the definition of the windows: inputs tokens[16 w : 16 w + 16] for w < 289."""
    ids = tokembed.encode_text(STORY.read_text(encoding="utf-8"))
    train_ids = torch.from_numpy(ids[: int(len(ids) * 0.9)].astype(np.int64))
    return torch.bincount(train_ids[: 289 * 16], minlength=V)


@pytest.fixture(scope="module")
def epoch_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("counts") / "run"
    train(TrainConfig(data=str(STORY), out=str(out), checkpoint_interval=17, **EPOCH), TINY, progress=False)
    return out


@pytest.mark.slow
def test_train_records_exactly_the_ids_it_read(epoch_run):
    counts = read_token_counts(epoch_run)
    assert counts.dtype == torch.int64 and counts.shape == (V,)
    assert torch.equal(counts, read_once_counts())
    assert int(counts.sum()) == json.loads((epoch_run / "config.json").read_text())["tokens_seen"]


@pytest.mark.slow
def test_tokens_absent_from_the_data_are_exactly_those_marked(epoch_run):
    table = load_table(epoch_run).with_min_count(1)
    never = set(torch.nonzero(read_once_counts() == 0).flatten().tolist())
    assert set(table.undertrained_ids().tolist()) == never
    assert table.counts_source.startswith("recorded by train")


@pytest.mark.slow
def test_a_resumed_run_counts_as_an_uninterrupted_one(tmp_path):
    cfg = dict(data=str(STORY), max_length=16, batch_size=8, stride=64, max_steps=11, checkpoint_interval=5)
    train(TrainConfig(out=str(tmp_path / "whole"), **cfg), TINY, progress=False)
    train(TrainConfig(out=str(tmp_path / "split"), **cfg), TINY, progress=False, stop_at=7)
    train(TrainConfig(out=str(tmp_path / "split"), **cfg), None, progress=False, resume=True)
    assert torch.equal(read_token_counts(tmp_path / "split"), read_token_counts(tmp_path / "whole"))
    assert int(read_token_counts(tmp_path / "whole").sum()) == 11 * 8 * 16


def test_resuming_a_checkpoint_without_counts_records_none(tmp_path):
    cfg = dict(data=str(STORY), out=str(tmp_path / "run"), max_length=16, batch_size=4, max_steps=4)
    cfg["tokenizer"] = "bytes"  # 257 ids: a checkpoint without counts is what is tested, not the vocabulary
    shape = {"context_length": 16, "dim": 16, "n_layers": 1, "n_heads": 2}
    train(TrainConfig(checkpoint_interval=2, **cfg), shape, progress=False, stop_at=2)
    (tmp_path / "run" / COUNTS_FILE).unlink()  # as written by an older tokembed, which wrote
    (tmp_path / "run" / "sha256.json").unlink()  # no checksums either
    with pytest.warns(UserWarning, match="loaded without verification"):
        train(TrainConfig(checkpoint_interval=2, **cfg), None, progress=False, resume=True, allow_unverified=True)
    assert read_token_counts(tmp_path / "run") is None  # not counts of half the run passed off as all of it


def test_prepare_records_corpus_counts_in_the_manifest(tmp_path, story):
    (tmp_path / "a.txt").write_text(story, encoding="utf-8")
    (tmp_path / "b.txt").write_text("Hello world. Hello again.", encoding="utf-8")
    out = tmp_path / "shards"
    assert main(["prepare", str(tmp_path / "a.txt"), str(tmp_path / "b.txt"), "--out", str(out), "--quiet"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    shards = tokembed.open_shards(out, split="train")
    direct = Counter(int(i) for s in range(len(shards.shards)) for i in shards.tokens(s))  # read from the shards
    assert {int(k): v for k, v in manifest["token_counts"]["train"].items()} == dict(direct)
    assert set(manifest["token_counts"]) == {"train", "val"}
    counts = tokembed.token_counts(out)  # from the manifest, without reading the shards
    assert {i: int(counts[i]) for i in torch.nonzero(counts).flatten().tolist()} == dict(direct)


@pytest.mark.slow
def test_corpus_overrides_the_recorded_counts_and_export_carries_them(epoch_run, tmp_path, story, capsys):
    (tmp_path / "other.txt").write_text("king king king queen", encoding="utf-8")
    assert main(["inspect", str(epoch_run), "tokens", " king", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["count"] == int(read_once_counts()[5822])
    assert main(["inspect", str(epoch_run), "tokens", " king", "--json", "--corpus", str(tmp_path / "other.txt")]) == 0
    assert json.loads(capsys.readouterr().out)[0]["count"] == 2  # "king" once at the start, " king" twice
    assert main(["export", str(epoch_run), str(tmp_path / "t.safetensors")]) == 0
    exported = load_table(tmp_path / "t.safetensors")
    assert torch.equal(exported.counts, read_once_counts()) and exported.counts_source.startswith("recorded by train")


def test_no_counts_is_said_and_bad_min_count_refused(tmp_path, capsys):
    ck = write_checkpoint(tmp_path / "ck", planted_table(8))  # no data: no counts recorded
    assert main(["inspect", str(ck), "undertrained"]) == 2
    err = capsys.readouterr().err
    assert "records no token counts; pass --corpus" in err and "checkpoint written by this tokembed" in err
    assert main(["inspect", str(ck), "neighbours", " king", "--min-count", "-1"]) == 2
    assert re.search(r"min_count must be an integer >= 0, got -1", capsys.readouterr().err)
    assert main(["inspect", str(ck), "neighbours", " king"]) == 0
    assert "records no token counts, so under-trained tokens are not marked" in capsys.readouterr().err


def test_a_projection_without_counts_is_a_random_sample_and_says_so():
    from tokembed.inspection.plot import plot_projection

    table = tokembed.EmbeddingTable(planted_table(8), "gpt2", source="planted")
    title = plot_projection(table, n_points=300).axes[0].get_title()
    assert "300 random tokens (no token counts: pass --corpus)" in title
    counted = table.with_counts(torch.arange(V) % 7, "a rule")
    fig = plot_projection(counted, n_points=300)
    assert "the 300 most frequent tokens" in fig.axes[0].get_title()
    assert fig.axes[1].get_ylabel() == "times read (a rule)"  # the colour bar says what the colours are
    assert "under-trained: read < 10 times" in fig.axes[0].get_legend().get_texts()[0].get_text()
