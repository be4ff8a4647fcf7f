"""``tokembed train --packing``: training on whole documents packed into windows, resumable.

The first step's loss is checked against the model at its initial weights reading every packed piece on its
own (positions from 0, nothing else in its attention): the definition of training on packed documents. Resume
is checked against the uninterrupted run.
"""

from __future__ import annotations

import json

import pytest
import torch

import tokembed
from conftest import STORY
from tokembed.data.batch import IGNORE_INDEX
from tokembed.training.config import TrainConfig
from tokembed.training.loop import train


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """The story's sentences as documents (most shorter than a window of 32 tokens), 10% held out."""
    tmp = tmp_path_factory.mktemp("packing")
    sentences = [p for p in STORY.read_text(encoding="utf-8").split(". ") if p.strip()]
    corpus = tmp / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": p}) + "\n" for p in sentences))
    tokembed.prepare_corpus([corpus], tmp / "shards", val_fraction=0.1, workers=1, progress=False)
    return tmp / "shards"


MODEL = tokembed.GPTConfig(context_length=32, dim=16, n_layers=1, n_heads=2)


def cfg(folder, out, **kw):
    base = dict(
        data=str(folder), out=str(out), max_length=32, batch_size=4, max_steps=6, eval_interval=3,
        eval_batches=1, checkpoint_interval=3, warmup_steps=2, packing="best-fit",
    )  # fmt: skip
    return TrainConfig(**{**base, **kw})


def test_the_first_step_learns_each_packed_document_on_its_own(folder, tmp_path):
    result = train(cfg(folder, tmp_path / "run", max_steps=1), MODEL, progress=False)
    torch.manual_seed(0)  # the run's seed: its initial weights
    model = tokembed.GPT(MODEL)
    loader = tokembed.create_dataloader(
        folder, batch_size=4, max_length=32, packing="best-fit", shuffle=True, seed=0, drop_last=True,
        return_documents=True,
    )  # fmt: skip
    batch = next(iter(loader))
    assert len(batch.cu_seqlens) - 1 > 4, "the batch packs several documents into a window"
    total, count = 0.0, 0
    with torch.no_grad():
        for x, y, lens in zip(batch.inputs, batch.targets, batch.doc_lens):
            at = 0
            for n in lens.tolist():
                xs, ys = x[at : at + n], y[at : at + n]
                at += n
                if n and (ys != IGNORE_INDEX).any():
                    total += model.loss(xs[None], ys[None], reduction="sum").item()
                    count += int((ys != IGNORE_INDEX).sum())
    assert result.log["train"][0]["loss"] == pytest.approx(total / count, rel=1e-5)


@pytest.mark.slow  # four runs of a GPT-2-vocabulary model: ~3 s
def test_a_packed_run_resumes_exactly(folder, tmp_path):
    whole = train(cfg(folder, tmp_path / "whole"), MODEL, progress=False)
    part = train(cfg(folder, tmp_path / "split"), MODEL, progress=False, stop_at=4)
    assert part.step == 4
    rest = train(cfg(folder, tmp_path / "split"), None, progress=False, resume=True)
    assert [r["loss"] for r in rest.log["train"]] == [r["loss"] for r in whole.log["train"]]
    saved = json.loads((tmp_path / "whole" / "config.json").read_text())
    assert saved["train"]["packing"] == "best-fit"
    with pytest.raises(ValueError, match=r"packing"):  # another packing reads other batches: refused
        train(cfg(folder, tmp_path / "split", packing=None, max_steps=8), None, progress=False, resume=True)


def test_packing_options_are_checked(folder, tmp_path):
    with pytest.raises(ValueError, match=r"packing must be one of 'best-fit', 'first-fit', got 'tight'"):
        cfg(folder, tmp_path / "x", packing="tight")
    with pytest.raises(ValueError, match=r"stride=8 does not apply with packing='best-fit' .*; leave stride out"):
        cfg(folder, tmp_path / "x", stride=8)


def test_the_command_line_trains_packed(folder, tmp_path, capsys):
    from tokembed.cli import main

    out = tmp_path / "cli"
    args = ["train", str(folder), "--out", str(out), "--dim", "16", "--layers", "1", "--heads", "2",
            "--max-length", "16", "--steps", "2", "--eval-interval", "2", "--eval-batches", "1",
            "--device", "cpu", "--quiet", "--materialize-packing", "--packing", "best-fit"]  # fmt: skip
    assert main(args) == 0
    saved = json.loads((out / "config.json").read_text())["train"]
    assert saved["packing"] == "best-fit" and saved["materialize_packing"] is True
    gathered = tmp_path / "gathered"  # the default materializes a small split; --no-materialize-packing gathers
    assert main([*args[:3], str(gathered), *args[4:-3], "--no-materialize-packing", "--packing", "best-fit"]) == 0
    assert json.loads((gathered / "config.json").read_text())["train"]["materialize_packing"] is False
    args[args.index(str(out))] = str(tmp_path / "other")
    assert main([*args[:-1], "tight"]) != 0
    assert "packing must be one of 'best-fit', 'first-fit', got 'tight'" in capsys.readouterr().err


def test_materialized_packing_trains_the_same_steps(folder, tmp_path):
    gathered = train(cfg(folder, tmp_path / "a", max_steps=3, materialize_packing=False), MODEL, progress=False)
    stored = train(cfg(folder, tmp_path / "b", max_steps=3, materialize_packing=True), MODEL, progress=False)
    assert [r["loss"] for r in stored.log["train"]] == [r["loss"] for r in gathered.log["train"]]
    train(cfg(folder, tmp_path / "c", max_steps=3), MODEL, progress=False, stop_at=2)  # the default: materialized
    rest = train(cfg(folder, tmp_path / "c", max_steps=3, materialize_packing=False), None, progress=False, resume=True)
    assert [r["loss"] for r in rest.log["train"]] == [r["loss"] for r in gathered.log["train"]]
    with pytest.raises(ValueError, match=r"materialize_packing=True applies with packing .*; give packing"):
        cfg(folder, tmp_path / "x", packing=None, materialize_packing=True)
