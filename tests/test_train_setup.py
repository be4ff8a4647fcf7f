"""What a run is, decided by `train()` itself: resume, the vocabulary, the data's identity, the global batch.

Was (issue 20 item 4, issue 24 items 2, 4, 7):
- resume merged the checkpoint's settings with the given ones in the CLI, so `train()` could not resume
  from ``out`` alone, and the CLI needed DATA (or --source) even to resume;
- ``train(TrainConfig(tokenizer="bytes", ...), GPTConfig(dim=16))`` built a 50,257-row table for 257 ids;
- a shard folder or text file moved elsewhere could not be resumed from (the path was the identity), and a
  different corpus at the same path was not noticed by the setup;
- the per-rank batch was the setting to match, so a run could not resume on another number of ranks.
"""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import STORY
from tokembed import GPTConfig, TrainConfig, load_checkpoint, train
from tokembed.cli import main

TINY = GPTConfig(context_length=16, dim=16, n_layers=1, n_heads=2)
SHAPE = {"context_length": 16, "dim": 16, "n_layers": 1, "n_heads": 2}  # TINY, its vocabulary the data's
# The runs read the story as bytes (257 ids): what is tested here is the setup, and a 257-row table trains five
# times faster than GPT-2's 50,257 rows. A resume must take the tokenizer from the checkpoint, as every other setting.
SMALL = ["--dim", "16", "--layers", "1", "--heads", "2", "--max-length", "16", "--batch-size", "4", "--tokenizer", "bytes"]  # fmt: skip
SCHEDULE = ["--eval-interval", "3", "--eval-batches", "2", "--checkpoint-interval", "3", "--warmup-steps", "2"]


@pytest.fixture(autouse=True)
def no_png(monkeypatch):
    monkeypatch.setattr("tokembed.model.checkpoint.write_loss_png", lambda log, path: False)  # speed: no PNG


def cfg(tmp_path, name="run", **kw) -> TrainConfig:
    base = dict(
        data=str(STORY), out=str(tmp_path / name), max_length=16, batch_size=4, max_steps=6, eval_interval=3,
        eval_batches=2, checkpoint_interval=3, warmup_steps=2, tokenizer="bytes",
    )  # fmt: skip
    return TrainConfig(**{**base, **kw})


def losses(out) -> tuple[list, list]:
    log = json.loads((out / "log.json").read_text())
    return [(e["step"], e["loss"]) for e in log["train"]], [(e["step"], e["loss"]) for e in log["val"]]


def saved_train(out) -> dict:
    return json.loads((out / "config.json").read_text())["train"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run every resumed run below must equal."""
    out = tmp_path_factory.mktemp("ref") / "whole"
    train(cfg(out.parent, "whole"), SHAPE, progress=False)
    return losses(out)


# ------------------------------------------------------------------------------------ train() owns resume


def test_resume_from_out_alone_takes_the_data_and_the_settings_from_the_checkpoint(tmp_path, reference):
    train(cfg(tmp_path, "cut"), SHAPE, progress=False, stop_at=2)
    result = train({"out": str(tmp_path / "cut")}, resume=True, progress=False)
    assert result.step == 6 and losses(tmp_path / "cut") == reference


def test_resume_with_changed_settings_keeps_the_rest(tmp_path, reference):
    train(cfg(tmp_path, "cut"), SHAPE, progress=False, stop_at=2)
    train({"out": str(tmp_path / "cut"), "eval_interval": 2, "checkpoint_interval": 1}, resume=True, progress=False)
    assert losses(tmp_path / "cut")[0] == reference[0]  # the training losses; evaluations now every 2 steps
    assert saved_train(tmp_path / "cut")["eval_interval"] == 2 and saved_train(tmp_path / "cut")["max_length"] == 16
    with pytest.raises(ValueError, match=r"cannot resume with a different training setup \(lr: 0\.003 -> 0\.1\)"):
        train({"out": str(tmp_path / "cut"), "lr": 0.1}, resume=True, progress=False)


def test_resume_with_the_same_model_options_is_accepted_and_with_others_refused(tmp_path, reference):
    train(cfg(tmp_path, "cut"), SHAPE, progress=False, stop_at=2)
    train({"out": str(tmp_path / "cut"), "max_steps": 4}, {"dim": 16, "n_layers": 1}, resume=True, progress=False)
    with pytest.raises(ValueError, match=r"another model \(dim: 16 -> 32\); omit the model options when resuming"):
        train({"out": str(tmp_path / "cut")}, {"dim": 32}, resume=True, progress=False)


def test_resume_compares_the_scheme_options_given_one_by_one(tmp_path):
    rope = {**SHAPE, "positional": "rope", "positional_options": {"base": 500.0}}
    train(cfg(tmp_path, "cut"), rope, progress=False, stop_at=1)
    again = {"positional": "rope", "positional_options": {"base": 500.0}}  # as a rerun of the command gives them
    train({"out": str(tmp_path / "cut"), "max_steps": 2}, again, resume=True, progress=False)
    with pytest.raises(ValueError, match=r"another model \(positional_options.base: 500.0 -> 1000.0\)"):
        train({"out": str(tmp_path / "cut")}, {"positional_options": {"base": 1000.0}}, resume=True, progress=False)


def test_cli_resume_reads_scheme_options_as_options_of_the_checkpoints_scheme(tmp_path, capsys):
    """``--rope-base`` without ``--positional`` on --resume belongs to the checkpoint's scheme (rope), as the
    help says: the checkpoint's model, options given must agree. Was: 'this model uses learned'."""
    out = str(tmp_path / "rope")
    start = ["train", str(STORY), "--out", out, *SMALL, "--steps", "2", "--quiet"]
    assert main([*start, "--positional", "rope", "--rope-base", "500", "--stop-at", "1"]) == 0
    assert main(["train", "--out", out, "--resume", "--rope-base", "500", "--quiet"]) == 0  # agrees
    assert json.loads((tmp_path / "rope" / "state.json").read_text())["step"] == 2
    capsys.readouterr()
    assert main(["train", "--out", out, "--resume", "--steps", "3", "--rope-base", "600", "--quiet"]) == 2
    assert "another model (positional_options.base: 500.0 -> 600.0)" in capsys.readouterr().err
    assert main(["train", "--out", out, "--resume", "--steps", "3", "--t5-max-distance", "64", "--quiet"]) == 2
    assert "--t5-max-distance is an option of --positional t5, but this model uses rope" in capsys.readouterr().err
    fresh = ["train", str(STORY), "--out", str(tmp_path / "new"), *SMALL, "--steps", "1", "--quiet"]
    assert main([*fresh, "--rope-base", "500"]) == 2  # a new run without --positional: GPTConfig's learned
    assert "--rope-base is an option of --positional rope, but this model uses learned" in capsys.readouterr().err


def test_resume_auto_starts_then_resumes(tmp_path, reference):
    out = tmp_path / "auto"
    train(cfg(tmp_path, "auto"), SHAPE, progress=False, stop_at=2, resume="auto")  # nothing there: a new run
    assert json.loads((out / "state.json").read_text())["step"] == 2
    train(cfg(tmp_path, "auto"), SHAPE, progress=False, resume="auto")  # a checkpoint: continued
    assert losses(out) == reference
    with pytest.raises(ValueError, match=r"resume must be True, False or 'auto', got 'yes'"):
        train(cfg(tmp_path, "auto"), resume="yes", progress=False)


def test_a_fresh_run_needs_data(tmp_path):
    with pytest.raises(ValueError, match=r"no training data: give data \(DATA, --source or --mixture\) to start a run"):
        train({"out": str(tmp_path / "new")}, progress=False)


# ---------------------------------------------------------------------------- the vocabulary is the data's


def test_the_vocabulary_and_end_of_text_come_from_the_data(tmp_path):
    shape = {"dim": 16, "n_layers": 1, "n_heads": 2}  # model options without a vocabulary: the data's
    result = train(cfg(tmp_path, "b", tokenizer="bytes", max_steps=1), shape, progress=False)
    model, _ = load_checkpoint(result.checkpoint)
    assert (model.config.vocab_size, model.config.eot_token, model.config.dim) == (257, 256, 16)
    assert model.config.context_length == 16  # the windows' length
    model, _ = load_checkpoint(train(cfg(tmp_path, "n", tokenizer="bytes", max_steps=1), progress=False).checkpoint)
    assert (model.config.vocab_size, model.config.eot_token) == (257, 256)


def test_a_model_vocabulary_other_than_the_datas_is_refused_naming_both(tmp_path):
    """Was: a 50,257-row table for 257 ids, silently (only a vocabulary smaller than the data's was refused)."""
    fix = r"use vocab_size=257, or leave the vocabulary out \(model options without vocab_size\): train\(\) takes it"
    with pytest.raises(
        ValueError, match=r"vocabulary has 50,257 ids, but the data was made with bytes \(257 ids.*" + fix
    ):
        train(cfg(tmp_path, tokenizer="bytes"), TINY, progress=False)
    with pytest.raises(ValueError, match=r"vocabulary has 60,000 ids, but the data was made with bytes"):
        train(cfg(tmp_path, tokenizer="bytes"), GPTConfig(vocab_size=60_000, context_length=16), progress=False)
    with pytest.raises(ValueError, match=r"vocabulary has 100 ids, but the data was made with bytes"):
        train(cfg(tmp_path, tokenizer="bytes"), {"vocab_size": 100}, progress=False)
    assert not (tmp_path / "run").exists()  # refused before anything was written


# -------------------------------------------------------------------- data identified by content, not path


def test_a_text_file_moved_elsewhere_resumes_and_other_text_at_its_path_is_refused(tmp_path, reference):
    text = tmp_path / "a.txt"
    shutil.copy(STORY, text)
    train(cfg(tmp_path, "cut", data=str(text)), SHAPE, progress=False, stop_at=2)
    moved = tmp_path / "moved" / "b.txt"
    moved.parent.mkdir()
    text.rename(moved)
    with pytest.raises(FileNotFoundError, match=r"the checkpoint's data .*a\.txt does not exist.*new location"):
        train({"out": str(tmp_path / "cut")}, resume=True, progress=False)
    text.write_text("another text " * 500)  # other bytes where the data was
    with pytest.raises(ValueError, match=r"a\.txt holds other data than the checkpoint .* was trained on.*sha256"):
        train({"out": str(tmp_path / "cut")}, resume=True, progress=False)
    train({"out": str(tmp_path / "cut"), "data": str(moved)}, resume=True, progress=False)
    assert losses(tmp_path / "cut") == reference
    assert saved_train(tmp_path / "cut")["data"] == str(moved)  # the next resume looks here


def prepared(tmp_path, name: str, text: str):
    from tokembed.shards.prepare import prepare_corpus

    docs = tmp_path / f"{name}-docs"
    shutil.rmtree(docs, ignore_errors=True)
    docs.mkdir()
    for i, p in enumerate(x for x in text.split("\n\n") if len(x) > 100):
        (docs / f"{i:03d}.txt").write_text(p, encoding="utf-8")
    prepare_corpus([docs], tmp_path / name, val_fraction=0.2, workers=1, progress=False, tokenizer="bytes")
    return tmp_path / name


def test_a_shard_folder_is_known_by_its_manifest_not_its_path(tmp_path, story):
    folder = prepared(tmp_path, "shards", story)
    whole = train(cfg(tmp_path, "whole", data=str(folder)), SHAPE, progress=False)
    train(cfg(tmp_path, "cut", data=str(folder)), SHAPE, progress=False, stop_at=2)
    copy = tmp_path / "elsewhere" / "shards"
    shutil.copytree(folder, copy)
    train(cfg(tmp_path, "cut", data=str(copy)), resume=True, progress=False)  # the same bytes at another path
    assert losses(tmp_path / "cut") == losses(whole.checkpoint)
    train(cfg(tmp_path, "cut2", data=str(folder)), SHAPE, progress=False, stop_at=2)
    shutil.rmtree(folder)
    prepared(tmp_path, "shards", story[: len(story) // 2])  # another corpus at the same path
    other = r"shards holds other data than the checkpoint .*cut2 was trained on \(manifest sha256 [0-9a-f]{12}"
    with pytest.raises(ValueError, match=other + r".*, the checkpoint's manifest sha256 [0-9a-f]{12}\)"):
        train({"out": str(tmp_path / "cut2")}, resume=True, progress=False)
    train({"out": str(tmp_path / "cut2"), "data": str(copy)}, resume=True, progress=False)  # its data, moved
    assert losses(tmp_path / "cut2") == losses(whole.checkpoint)


def test_a_mixture_resumes_without_its_sources_named_and_from_moved_copies(tmp_path, story):
    from tokembed import Mixture

    half = len(story) // 2
    a, b = prepared(tmp_path, "a", story[:half]), prepared(tmp_path, "b", story[half:])
    mixture = Mixture({a: 0.7, b: 0.3})
    whole = train(cfg(tmp_path, "whole", data=mixture), SHAPE, progress=False)
    train(cfg(tmp_path, "cut", data=mixture), SHAPE, progress=False, stop_at=2)
    assert main(["train", "--out", str(tmp_path / "cut"), "--resume", "--stop-at", "4", "--no-progress"]) == 0
    moved = tmp_path / "moved"
    moved.mkdir()
    a.rename(moved / "a")
    b.rename(moved / "b")
    with pytest.raises(FileNotFoundError, match=r"give its new location as data \(--source PATH:WEIGHT for each"):
        train({"out": str(tmp_path / "cut")}, resume=True, progress=False)
    sources = ["--source", f"{moved / 'a'}:0.7", "--source", f"{moved / 'b'}:0.3"]
    assert main(["train", *sources, "--out", str(tmp_path / "cut"), "--resume", "--no-progress"]) == 0
    assert losses(tmp_path / "cut") == losses(whole.checkpoint)
    assert saved_train(tmp_path / "cut")["data"]["sources"] == [[str(moved / "a"), 0.7], [str(moved / "b"), 0.3]]


# ------------------------------------------------------------------------------------------- the CLI


def test_cli_resume_without_data_and_resume_auto(tmp_path, reference, capsys):
    out = tmp_path / "cli"
    start = ["train", str(STORY), "--out", str(out), *SMALL, *SCHEDULE, "--steps", "6", "--stop-at", "2"]
    assert main([*start, "--quiet"]) == 0
    assert json.loads((out / "state.json").read_text())["step"] == 2
    assert main(["train", "--out", str(out), "--resume", "--stop-at", "4", "--quiet"]) == 0  # no DATA
    assert main(["train", "--resume", "auto", "--out", str(out), "--quiet"]) == 0
    assert losses(out) == reference
    fresh = tmp_path / "fresh"
    args = ["train", str(STORY), "--out", str(fresh), *SMALL, *SCHEDULE, "--steps", "6", "--quiet"]
    assert main([*args, "--resume", "auto"]) == 0 and losses(fresh) == reference  # nothing to resume: started
    assert main([*args, "--resume", "auto"]) == 0  # finished: nothing more to do, no error
    capsys.readouterr()
    assert main(["train", "--out", str(tmp_path / "none"), "--quiet"]) == 2
    assert "no training data: give data (DATA, --source or --mixture)" in capsys.readouterr().err


# -------------------------------------------------------------------------------------- the global batch


def test_global_batch_size_is_the_setting_that_must_match(tmp_path, reference):
    via_global = cfg(tmp_path, "g", batch_size=None, global_batch_size=4)
    train(via_global, SHAPE, progress=False)
    assert losses(tmp_path / "g") == reference  # one process: 4 windows per step either way
    assert (saved_train(tmp_path / "g")["batch_size"], saved_train(tmp_path / "g")["global_batch_size"]) == (4, 4)
    train(cfg(tmp_path, "cut"), SHAPE, progress=False, stop_at=2)
    with pytest.raises(ValueError, match=r"global batch of 4 windows.*8 windows \(batch_size 8 x 1 rank\)"):
        train({"out": str(tmp_path / "cut"), "batch_size": 8}, resume=True, progress=False)
    train({"out": str(tmp_path / "cut"), "global_batch_size": 4}, resume=True, progress=False)
    assert losses(tmp_path / "cut") == reference


@pytest.mark.parametrize(
    "kw, msg",
    [
        (dict(global_batch_size=0), "global_batch_size must be >= 1, got 0"),
        (dict(batch_size=4, global_batch_size=6), r"global_batch_size=6 is not a multiple of batch_size=4"),
    ],
)
def test_bad_batch_settings(tmp_path, kw, msg):
    with pytest.raises(ValueError, match=msg):
        cfg(tmp_path, **kw)


def test_a_batch_that_does_not_fit_the_world_size_is_refused_at_the_start(tmp_path):
    with pytest.raises(ValueError, match=r"batch_size=4 x 1 rank is not global_batch_size=8"):
        train(cfg(tmp_path, batch_size=4, global_batch_size=8), SHAPE, progress=False)
