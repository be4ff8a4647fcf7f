"""Validation of a mixture: each source's loss and the mixture-weighted total, the same in train and eval.

Was (issue 24 item 9): `eval` concatenated the sources' validation splits (so each weighed by its size, not
its weight), ``--max-tokens`` took its windows from the first source alone, the output did not say what was
scored, and training logged one blended validation loss.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from conftest import SPEC_FILES, STORY
from tokembed import GPTConfig, Mixture, TrainConfig, evaluate, load_checkpoint, train
from tokembed.cli import main

L = 16


def prepared(root, name: str, text: str):
    from tokembed.shards.prepare import prepare_corpus

    docs = root / f"{name}-docs"
    docs.mkdir()
    for i, p in enumerate(x for x in text.split("\n\n") if len(x) > 100):
        (docs / f"{i:03d}.txt").write_text(p, encoding="utf-8")
    prepare_corpus([docs], root / name, val_fraction=0.25, workers=1, progress=False, tokenizer="bytes")
    return root / name


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A model trained on a 0.7/0.3 mixture of an English story and the chapter in Korean (bytes)."""
    root = tmp_path_factory.mktemp("mix")
    story = prepared(root, "story", STORY.read_text(encoding="utf-8"))
    korean = next(t for t in (p.read_text(encoding="utf-8") for p in SPEC_FILES) if "텍스트" in t)
    chapter = prepared(root, "chapter", korean)
    config = TrainConfig(
        data=Mixture({story: 0.7, chapter: 0.3}), out=str(root / "run"), max_length=L, batch_size=4, max_steps=12,
        eval_interval=6, eval_batches=3, checkpoint_interval=12, warmup_steps=2,
    )  # fmt: skip
    result = train(config, {"context_length": L, "dim": 16, "n_layers": 1, "n_heads": 2}, progress=False)
    return result, story, chapter


def mean_loss(model, tokens: np.ndarray, length: int, windows: int) -> float:
    """The definition: mean next-token cross-entropy over the first non-overlapping windows of ``tokens``."""
    ids = torch.as_tensor(tokens.astype(np.int64))
    x = torch.stack([ids[i * length : i * length + length] for i in range(windows)])
    y = torch.stack([ids[i * length + 1 : i * length + length + 1] for i in range(windows)])
    with torch.no_grad():
        logits = model.head(model.hidden(x))  # (W,T,V)
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten()).item()


def val_tokens(folder) -> np.ndarray:
    from tokembed.shards.reader import open_shards

    split = open_shards(folder, split="val")
    return np.asarray(split.read(0, split.n_tokens))


def test_each_source_is_scored_and_the_total_is_weighted_by_the_mixture(run):
    result, story, chapter = run
    model, _ = load_checkpoint(result.checkpoint)
    (row,) = evaluate(result.checkpoint, lengths=[L], max_tokens=3 * L)
    by_source = {s["source"]: s for s in row["sources"]}
    assert set(by_source) == {str(story), str(chapter)}
    assert (by_source[str(story)]["weight"], by_source[str(chapter)]["weight"]) == pytest.approx((0.7, 0.3))
    for folder in (story, chapter):  # --max-tokens takes the same number of tokens from every source
        got = by_source[str(folder)]
        assert got["windows"] == 3 and got["tokens"] == 3 * L
        assert got["loss"] == pytest.approx(mean_loss(model, val_tokens(folder), L, 3), rel=1e-5)
        assert got["perplexity"] == pytest.approx(math.exp(got["loss"]))
    total = 0.7 * by_source[str(story)]["loss"] + 0.3 * by_source[str(chapter)]["loss"]
    assert row["loss"] == pytest.approx(total) and row["perplexity"] == pytest.approx(math.exp(total))
    assert row["windows"] == 6 and row["tokens"] == 6 * L
    assert abs(by_source[str(story)]["loss"] - by_source[str(chapter)]["loss"]) > 0.1  # two different texts


def test_training_logs_each_sources_loss_and_the_same_weighted_total(run):
    result, story, chapter = run
    last = result.log["val"][-1]
    assert last["step"] == 12 and set(last["sources"]) == {str(story), str(chapter)}
    total = 0.7 * last["sources"][str(story)] + 0.3 * last["sources"][str(chapter)]
    assert last["loss"] == pytest.approx(total) and result.val_loss == last["loss"]
    # The run's evaluation budget (3 batches of 4 windows) is shared out by weight: ceil(12 w) windows each.
    model, _ = load_checkpoint(result.checkpoint)
    expected = {
        str(story): mean_loss(model, val_tokens(story), L, 9),
        str(chapter): mean_loss(model, val_tokens(chapter), L, 4),
    }
    assert last["sources"] == pytest.approx(expected, rel=1e-5)


def test_one_source_has_one_entry_and_the_plain_loss(tmp_path):
    out = tmp_path / "one"
    train(
        TrainConfig(data=str(STORY), out=str(out), max_length=L, batch_size=4, max_steps=2, eval_batches=1),
        GPTConfig(context_length=L, dim=16, n_layers=1, n_heads=2),
        progress=False,
    )
    (row,) = evaluate(out, lengths=[L], max_windows=2)
    assert [s["source"] for s in row["sources"]] == [str(STORY.resolve())] and row["sources"][0]["weight"] == 1.0
    assert row["sources"][0]["loss"] == row["loss"]


def test_cli_eval_names_what_it_scored(run, capsys):
    result, story, chapter = run
    assert main(["eval", str(result.checkpoint), "--lengths", str(L), "--max-tokens", str(2 * L)]) == 0
    out = capsys.readouterr().out
    assert f"validation splits of {story} (weight 0.7" in out and f"{chapter} (weight 0.3" in out
    assert f"| {L} | {story.name} |" in out and f"| {L} | {chapter.name} |" in out
    assert f"| {L} | mixture (weighted) |" in out
