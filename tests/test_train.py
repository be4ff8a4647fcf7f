"""Training, checkpoints, exact resume, evaluation, the CLI and the positions experiment."""

from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors.torch import load_file, save_file

import tokembed
from conftest import STORY, TINY
from tokembed import GPTConfig, TrainConfig, load_checkpoint, train
from tokembed.cli import main
from tokembed.training.config import lr_at
from tokembed.training.data import load_training_data

# Tests of errors and of the save path read the story as bytes (257 ids): a 257-row table trains and saves five
# times faster than GPT-2's 50,257 rows, which the layout, resume and CLI tests here keep training.
BYTES = {"tokenizer": "bytes"}
SHAPE = {"context_length": 16, "dim": 16, "n_layers": 1, "n_heads": 2}  # TINY, its vocabulary the data's


def cfg(tmp_path, name="run", **kw):
    base = dict(
        data=str(STORY),
        out=str(tmp_path / name),
        max_length=16,
        batch_size=4,
        max_steps=6,
        eval_interval=3,
        eval_batches=2,
        checkpoint_interval=3,
        warmup_steps=2,
    )
    return TrainConfig(**{**base, **kw})


def test_learning_rate_schedule_warmup_then_cosine():
    c = TrainConfig(data="x", out="y", lr=1e-3, warmup_steps=10, max_steps=110, min_lr_ratio=0.1)
    assert [lr_at(s, c) for s in (0, 4, 9)] == pytest.approx([1e-4, 5e-4, 1e-3])  # linear warmup to the peak
    assert lr_at(60, c) == pytest.approx(0.55e-3)  # half way through the cosine: (peak + floor) / 2
    assert lr_at(110, c) == pytest.approx(1e-4) and lr_at(500, c) == pytest.approx(1e-4)


@pytest.mark.parametrize(
    "kwargs, msg",
    [
        (dict(max_length=0), r"max_length must be >= 1, got 0"),
        (dict(lr=-1.0), r"lr must be > 0, got -1.0"),
        (dict(val_fraction=1.0), r"val_fraction must be in \(0, 1\), got 1.0"),
        (dict(warmup_steps=-1), r"warmup_steps must be an integer >= 0, got -1"),
        (dict(weight_decay=-0.1), r"weight_decay and grad_clip must be >= 0, got -0.1 and 1.0"),
        (dict(beta2=1.0), r"beta1 and beta2 must be in \[0, 1\), got 0.9 and 1.0"),
        (dict(min_lr_ratio=2.0), r"min_lr_ratio must be in \[0, 1\], got 2.0"),
        (dict(seed=-1), r"seed must be an integer >= 0, got -1"),
    ],
)
def test_bad_train_configs(kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        TrainConfig(data="x", out="y", **kwargs)


def test_text_files_hold_out_their_last_tenth(story):
    data = load_training_data(STORY)
    ids = tokembed.encode_text(story)
    cut = int(len(ids) * 0.9)
    assert data.n_train_tokens == cut and len(data.val) == len(ids) - cut
    assert data.train.tolist() == ids[:cut].tolist() and data.val.tolist() == ids[cut:].tolist()


@pytest.mark.loss_png  # conftest draws loss.png only where a test looks at it
def test_checkpoint_layout_and_round_trip(tmp_path):
    result = train(cfg(tmp_path), TINY, progress=False)
    ckpt = tmp_path / "run"
    assert result.step == 6 and result.checkpoint == ckpt
    config = json.loads((ckpt / "config.json").read_text())
    assert config["format"] == "tokembed-checkpoint" and config["version"] == 1 and config["tokenizer"] == "gpt2"
    assert config["model"] == TINY.to_dict() and config["train"]["data"] == str(STORY) and config["step"] == 6
    assert config["tokens_seen"] == 6 * 4 * 16
    weights = load_file(str(ckpt / "model.safetensors"))
    assert weights["embed.token.weight"].shape == (50257, 16) and weights["embed.position.weight"].shape == (16, 16)
    assert "head.weight" not in weights  # tied: stored once
    log = json.loads((ckpt / "log.json").read_text())
    assert [r["step"] for r in log["train"]] == [1, 2, 3, 4, 5, 6] and set(log["train"][0]) == {
        "step",
        "tokens",
        "loss",
        "lr",
        "tokens_per_s",
    }
    assert [r["step"] for r in log["val"]] == [3, 6]
    assert (ckpt / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (ckpt / "optimizer.pt").exists() and "loader" in json.loads((ckpt / "state.json").read_text())
    # no temporary or old directories left; the earlier checkpoint (step 3) is kept beside it (--keep, default 3)
    assert sorted(p.name for p in tmp_path.glob("run.*")) == ["run.step-0000003"]
    model, _ = load_checkpoint(ckpt)
    assert model.head.weight is model.embed.token.weight
    ids = torch.randint(0, 50257, (2, 16))
    torch.manual_seed(0)
    twin = tokembed.GPT(TINY)
    twin.load_state_dict(weights, strict=False)
    torch.testing.assert_close(model(ids), twin.eval()(ids))


@pytest.mark.slow
def test_resumed_run_equals_uninterrupted_run(tmp_path):
    # dropout on (the RNG state is restored) and more steps than an epoch has batches (the loader's position is restored)
    model = GPTConfig(context_length=16, dim=16, n_layers=1, n_heads=2, dropout=0.1, positional="rope")
    kw = dict(max_steps=11, batch_size=8, max_length=16, stride=64, eval_interval=4, checkpoint_interval=5)
    whole = train(cfg(tmp_path, "whole", **kw), model, progress=False)
    part = train(cfg(tmp_path, "split", **kw), model, progress=False, stop_at=7)
    assert part.step == 7
    rest = train(cfg(tmp_path, "split", **kw), None, progress=False, resume=True)
    assert [r["loss"] for r in rest.log["train"]] == [r["loss"] for r in whole.log["train"]]
    assert rest.log["val"] == whole.log["val"]
    a, _ = load_checkpoint(tmp_path / "whole")
    b, _ = load_checkpoint(tmp_path / "split")
    for (n, p), q in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(p, q), n


@pytest.mark.parametrize("positional", ["t5", "shaw"])
def test_checkpoints_of_models_with_learned_relative_terms(tmp_path, positional):
    model = GPTConfig(context_length=16, dim=16, n_layers=2, n_heads=2, positional=positional)
    train(cfg(tmp_path, max_steps=1), model, progress=False)
    loaded, _ = load_checkpoint(tmp_path / "run")
    weights = load_file(str(tmp_path / "run" / "model.safetensors"))
    for name, p in loaded.state_dict().items():
        if name != "head.weight":
            assert torch.equal(p, weights[name]), name


def test_existing_out_needs_resume_and_resume_needs_a_checkpoint(tmp_path):
    train(cfg(tmp_path, max_steps=1, **BYTES), SHAPE, progress=False)
    with pytest.raises(FileExistsError, match=r"already exists; pass resume=True \(--resume\) to continue it"):
        train(cfg(tmp_path, max_steps=1, **BYTES), SHAPE, progress=False)
    with pytest.raises(FileNotFoundError, match=r"nothing to resume"):
        train(cfg(tmp_path, "other", **BYTES), SHAPE, progress=False, resume=True)
    # The global batch is what must match (issue 24 item 2): was "a different training setup (batch_size: 4 -> 2)"
    with pytest.raises(ValueError, match=r"global batch of 4 windows per step, this one would read 2 windows"):
        train(cfg(tmp_path, max_steps=1, batch_size=2, **BYTES), None, progress=False, resume=True)


def test_context_shorter_than_windows_is_refused(tmp_path):
    with pytest.raises(
        ValueError,
        match=r"max_length=32 exceeds the model's context_length=16; lower max_length or raise context_length",
    ):
        train(cfg(tmp_path, max_length=32), TINY, progress=False)


def test_a_failed_save_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    train(cfg(tmp_path, max_steps=3, **BYTES), SHAPE, progress=False)
    before = (tmp_path / "run" / "model.safetensors").read_bytes()
    import tokembed.model.checkpoint as ck

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(ck, "save_file", broken)
    with pytest.raises(OSError, match="disk full"):
        train(cfg(tmp_path, max_steps=6, **BYTES), None, progress=False, resume=True)
    assert (tmp_path / "run" / "model.safetensors").read_bytes() == before
    assert json.loads((tmp_path / "run" / "config.json").read_text())["step"] == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_init_embeddings_from_a_gpt2_file(tmp_path):
    torch.manual_seed(1)
    wte, wpe = torch.randn(50257, 16), torch.randn(1024, 16)
    save_file(
        {"wte.weight": wte, "wpe.weight": wpe, "h.0.ln_1.weight": torch.ones(16)}, str(tmp_path / "model.safetensors")
    )
    train(
        cfg(
            tmp_path,
            max_steps=1,
            lr=1e-12,
            warmup_steps=0,
            weight_decay=0.0,
            init_embeddings=str(tmp_path / "model.safetensors"),
        ),
        TINY,
        progress=False,
    )
    model, _ = load_checkpoint(tmp_path / "run")
    torch.testing.assert_close(model.embed.token.weight, wte, atol=1e-6, rtol=0)
    torch.testing.assert_close(model.embed.position.weight, wpe[:16], atol=1e-6, rtol=0)
    with pytest.raises(
        ValueError, match=r"GPT-2 token table .* has shape \(50257, 16\), the model needs \(50257, 32\); use --dim 16"
    ):
        train(
            cfg(tmp_path, "wide", max_steps=1, init_embeddings=str(tmp_path / "model.safetensors")),
            GPTConfig(context_length=16, dim=32, n_heads=2, n_layers=1),
            progress=False,
        )


def test_resume_does_not_read_the_init_embeddings_again(tmp_path):
    # The checkpoint holds the embeddings; the GPT-2 file that started them may be gone by now.
    weights = tmp_path / "model.safetensors"
    save_file({"wte.weight": torch.randn(50257, 16), "wpe.weight": torch.randn(1024, 16)}, str(weights))
    config = cfg(tmp_path, max_steps=4, checkpoint_interval=2, init_embeddings=str(weights))
    train(config, TINY, stop_at=2, progress=False)
    weights.unlink()
    assert train(config, resume=True, progress=False).step == 4


def test_numpy_scalars_are_stored_as_plain_numbers(tmp_path):
    # config.json must be writable: a numpy scalar accepted by the checks is stored as int/float.
    import numpy as np

    config = cfg(tmp_path, seed=np.int64(3), warmup_steps=np.int64(1), lr=np.float32(1e-3), max_steps=np.int64(2))
    assert [type(getattr(config, k)) for k in ("seed", "warmup_steps", "lr", "max_steps")] == [int, int, float, int]
    assert train(config, TINY, progress=False).step == 2


@pytest.mark.slow
def test_a_tiny_model_learns_the_story(tmp_path):
    # The default tiny model (dim 64, 2 layers), 30 steps of 8 x 32 tokens: far under ln(50257) = 10.8.
    result = train(
        cfg(
            tmp_path,
            max_length=32,
            batch_size=8,
            max_steps=30,
            eval_interval=30,
            checkpoint_interval=30,
            warmup_steps=5,
            eval_batches=8,
        ),
        None,
        progress=False,
    )
    first = result.log["train"][0]["loss"]
    assert first == pytest.approx(math.log(50257), abs=0.3)
    assert result.train_loss < 7.0 and result.val_loss < 7.5


# ------------------------------------------------------------------------------------------- evaluation


def test_eval_reports_learned_positions_as_not_applicable_past_the_table(tmp_path):
    train(cfg(tmp_path, max_steps=2, **BYTES), SHAPE, progress=False)
    rows = tokembed.evaluate(tmp_path / "run", lengths=[16, 32], max_windows=3)
    assert (
        rows[0]["length"] == 16
        and rows[0]["windows"] == 3
        and rows[0]["perplexity"] == pytest.approx(math.exp(rows[0]["loss"]))
    )
    assert rows[1] == {
        "length": 32,
        "loss": None,
        "perplexity": None,
        "note": "learned positions stop at 16: the table has no row for position 16 and beyond",
    }


def test_eval_equals_the_mean_loss_over_windows(tmp_path):
    train(
        cfg(tmp_path, max_steps=1),
        GPTConfig(context_length=16, dim=16, n_layers=1, n_heads=2, positional="alibi"),
        progress=False,
    )
    model, config = load_checkpoint(tmp_path / "run")
    val = torch.as_tensor(load_training_data(STORY).val)
    rows = tokembed.evaluate((model, config), lengths=[32], max_windows=4)
    windows = torch.stack([val[i * 32 : i * 32 + 33] for i in range(4)])
    expected = torch.nn.functional.cross_entropy(model(windows[:, :-1]).flatten(0, 1), windows[:, 1:].flatten())
    assert rows[0]["loss"] == pytest.approx(expected.item(), rel=1e-5) and rows[0]["tokens"] == 4 * 32


def test_eval_too_long_for_the_validation_text(tmp_path):
    train(
        cfg(tmp_path, max_steps=1),
        GPTConfig(context_length=16, dim=16, n_layers=1, n_heads=2, positional="none"),
        progress=False,
    )
    with pytest.raises(
        ValueError, match=r"the validation text has \d+ tokens, fewer than one window of length 4096 needs \(4097\)"
    ):
        tokembed.evaluate(tmp_path / "run", lengths=[4096])


@pytest.mark.slow
def test_eval_with_rope_scaling(tmp_path):
    from tokembed.training.evaluation import rope_scaled

    train(
        cfg(tmp_path, max_steps=1),
        GPTConfig(context_length=16, dim=16, n_layers=1, n_heads=2, positional="rope"),
        progress=False,
    )
    model, config = load_checkpoint(tmp_path / "run")
    with torch.no_grad():
        model.blocks[0].attn.qkv.weight.mul_(30)  # make attention depend on positions
    ids = torch.randint(0, 50257, (1, 64))
    base = model(ids)
    with rope_scaled(model, "ntk", 4.0):
        assert not torch.allclose(model(ids), base)
    torch.testing.assert_close(model(ids), base, rtol=0, atol=0)  # restored
    plain, pi = (
        tokembed.evaluate((model, config), lengths=[16, 64], max_windows=2, rope_scaling=s) for s in (None, "linear")
    )
    assert plain[0] == pi[0]  # no scaling at the trained length
    assert plain[1]["loss"] != pi[1]["loss"] and pi[1]["note"] == "rope linear scaling x4"
    train(cfg(tmp_path, "l", max_steps=1), TINY, progress=False)
    with pytest.raises(ValueError, match=r"rope_scaling applies to rope models; this one uses 'learned' positions"):
        tokembed.evaluate(tmp_path / "l", lengths=[16], rope_scaling="ntk")


# ------------------------------------------------------------------------------------------- CLI


def test_cli_train_eval_and_resume(tmp_path, capsys):
    out = tmp_path / "ck"
    args = [
        "train",
        str(STORY),
        "--out",
        str(out),
        "--positional",
        "alibi",
        "--dim",
        "16",
        "--layers",
        "1",
        "--heads",
        "2",
        "--max-length",
        "16",
        "--batch-size",
        "4",
        "--steps",
        "2",
        "--eval-interval",
        "2",
        "--eval-batches",
        "1",
        "--quiet",
    ]
    assert main(args) == 0
    assert "step 2: train loss" in capsys.readouterr().out
    assert main(["train", str(STORY), "--out", str(out), "--resume", "--steps", "3", "--quiet"]) == 0
    assert json.loads((out / "config.json").read_text())["step"] == 3
    assert main(["eval", str(out), "--lengths", "16,64", "--max-windows", "2"]) == 0
    table = capsys.readouterr().out
    assert "| 16 |" in table and "| 64 |" in table and "n/a" not in table
    assert main(["eval", str(out), "--lengths", "16", "--max-windows", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["windows"] == 1


def test_cli_model_options_reach_the_checkpoint(tmp_path, capsys):
    out = tmp_path / "ck"
    args = [
        "train",
        str(STORY),
        "--out",
        str(out),
        "--positional",
        "t5",
        "--t5-buckets",
        "8",
        "--t5-max-distance",
        "20",
        "--document-mask",
        "--dim",
        "16",
        "--layers",
        "1",
        "--heads",
        "2",
        "--max-length",
        "16",
        "--batch-size",
        "2",
        "--steps",
        "1",
        "--eval-batches",
        "1",
        "--quiet",
    ]
    assert main(args) == 0
    model = json.loads((out / "config.json").read_text())["model"]
    assert (model["positional_options"], model["document_mask"], model["eot_token"]) == (
        {"num_buckets": 8, "max_distance": 20},
        True,
        50256,
    )
    capsys.readouterr()
    assert (
        main(["eval", str(out), "--lengths", "16,32", "--max-windows", "1", "--json"]) == 0
    )  # evaluated with the same mask
    assert [row["length"] for row in json.loads(capsys.readouterr().out)] == [16, 32]


@pytest.mark.parametrize(
    "extra, msg",
    [
        (["--dim", "30", "--heads", "4"], "n_heads=4 does not divide dim=30"),
        (["--positional", "shaw", "--shaw-max-distance", "0"], "shaw_max_distance must be >= 1, got 0"),
        (["--context-length", "8", "--max-length", "16"], "max_length=16 exceeds the model's context_length=8"),
    ],
)
def test_cli_bad_model_options(tmp_path, capsys, extra, msg):
    assert main(["train", str(STORY), "--out", str(tmp_path / "x"), "--steps", "1", "--quiet", *extra]) == 2
    assert f"tokembed train: error: {msg}" in capsys.readouterr().err


def test_cli_unknown_scheme_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["train", str(STORY), "--out", str(tmp_path / "x"), "--positional", "xpos"])
    assert "invalid choice: 'xpos'" in capsys.readouterr().err


def test_cli_eval_of_a_missing_checkpoint(tmp_path, capsys):
    assert main(["eval", str(tmp_path / "nope")]) == 2
    assert f"tokembed eval: error: checkpoint {tmp_path / 'nope'} does not exist" in capsys.readouterr().err


@pytest.mark.slow
def test_positions_experiment_quick(tmp_path, capsys):
    out = tmp_path / "exp"
    args = ["experiment", "positions", str(STORY), "--out", str(out), "--quick", "--quiet"]
    assert main([*args, "--tokenizer", "bytes"]) == 0
    doc = json.loads((out / "results.json").read_text())
    assert doc["lengths"] == [16, 32]
    rope_rows = {"rope+pi", "rope+ntk", "rope+yarn", "rope+llama3"}
    assert set(doc["results"]) == {"learned", "sinusoidal", "rope", "alibi", "t5", "shaw", "none"} | rope_rows
    for name, by_eval in doc["results"].items():
        assert set(by_eval) == {"nonoverlapping", "sliding"}
        for rows in by_eval.values():
            assert [r["length"] for r in rows] == [16, 32]  # every length present, in order
            for r in rows:
                if name == "learned" and r["length"] > 16:  # refused past its table, with the reason beside it
                    assert r["loss"] is None and "learned positions stop at 16" in r["note"]
                else:
                    assert 0 < r["loss"] < math.log(257) + 0.5 and r["tokens"] > 0
        assert all(r["stride"] == r["length"] for r in by_eval["nonoverlapping"] if r["loss"] is not None)
        assert all(r["stride"] == r["length"] // 2 for r in by_eval["sliding"] if r["loss"] is not None)
    assert doc["config"]["tokenizer"] == "bytes" and doc["runs"]["rope"]["parameters"] > 0
    assert json.loads((out / "rope" / "config.json").read_text())["model"]["vocab_size"] == 257
    md = (out / "positions.md").read_text()
    assert "| scheme | evaluation | L=16 (1x) | L=32 (2x) |" in md and "| learned | sliding | " in md and "n/a" in md
    for png in ("positions.png", "positions-nonoverlapping.png", "positions-sliding.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
    # a second run reuses the trained checkpoints
    assert main([*args, "--tokenizer", "bytes", "--schemes", "alibi"]) == 0
    assert json.loads((out / "results.json").read_text())["results"]["alibi"] == doc["results"]["alibi"]


def test_train_and_eval_on_a_shard_folder(tmp_path, story):
    from tokembed.shards.prepare import prepare_corpus

    docs = tmp_path / "docs"
    docs.mkdir()
    paragraphs = [p for p in story.split("\n\n") if len(p) > 200]
    for i, p in enumerate(paragraphs):
        (docs / f"{i:03d}.txt").write_text(p, encoding="utf-8")
    prepare_corpus([docs], tmp_path / "shards", val_fraction=0.3, workers=1, progress=False)
    data = load_training_data(tmp_path / "shards")
    assert data.val is not None and len(data.val) > 17 and data.n_train_tokens > len(data.val)
    result = train(cfg(tmp_path, data=str(tmp_path / "shards"), max_steps=2, eval_interval=2), TINY, progress=False)
    assert result.val_loss is not None and math.isfinite(result.val_loss)
    assert tokembed.evaluate(tmp_path / "run", lengths=[16], max_windows=1)[0]["windows"] == 1


def test_checkpoint_errors_say_what_is_wrong(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"checkpoint .*nope does not exist"):
        load_checkpoint(tmp_path / "nope")
    (tmp_path / "file").write_text("x")
    with pytest.raises(
        NotADirectoryError, match=r"is not a directory: give the directory written by `tokembed train --out`"
    ):
        load_checkpoint(tmp_path / "file")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"is not a tokembed checkpoint: it has no config.json"):
        load_checkpoint(tmp_path / "empty")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text('{"format": "something-else"}')
    with pytest.raises(
        ValueError,
        match=r"is not a tokembed checkpoint config \(format 'something-else', expected 'tokembed-checkpoint'\)",
    ):
        load_checkpoint(bad)
    (bad / "config.json").write_text('{"format": "tokembed-checkpoint", "version": 9}')
    with pytest.raises(ValueError, match=r"has checkpoint version 9; this tokembed reads version 1: upgrade tokembed"):
        load_checkpoint(bad)
    train(cfg(tmp_path, max_steps=1, **BYTES), SHAPE, progress=False)
    weights = load_file(str(tmp_path / "run" / "model.safetensors"))
    del weights["norm.weight"]
    save_file(weights, str(tmp_path / "run" / "model.safetensors"))
    with pytest.raises(ValueError, match=r"run/model.safetensors is damaged \(its sha256 differs"):
        load_checkpoint(tmp_path / "run")  # the checksums name the changed file first
    (tmp_path / "run" / "sha256.json").unlink()  # as a checkpoint of tokembed 0.1 (no checksums), read unverified
    with pytest.raises(
        ValueError, match=r"does not match its config: missing weights \['norm.weight'\], unexpected weights \[\]"
    ):
        load_checkpoint(tmp_path / "run", allow_unverified=True)
    (tmp_path / "run" / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match=r"has no model.safetensors; the checkpoint is incomplete"):
        load_checkpoint(tmp_path / "run", allow_unverified=True)
    # a save interrupted between its two renames leaves the previous checkpoint beside: the error points at it
    (tmp_path / "run.old-abc" / "ckpt").mkdir(parents=True)
    (tmp_path / "run" / "config.json").rename(tmp_path / "run.old-abc" / "ckpt" / "config.json")
    import shutil

    shutil.rmtree(tmp_path / "run")
    with pytest.raises(
        FileNotFoundError, match=r"a save was interrupted: the previous checkpoint is .*run.old-abc/ckpt \(move it to"
    ):
        load_checkpoint(tmp_path / "run")


def test_evaluate_and_experiment_option_errors(tmp_path):
    from tokembed import PositionsExperiment

    train(cfg(tmp_path, max_steps=1, **BYTES), SHAPE, progress=False)
    with pytest.raises(ValueError, match=r"lengths is empty: give at least one window length"):
        tokembed.evaluate(tmp_path / "run", lengths=[])
    with pytest.raises(ValueError, match=r"length must be >= 1, got 0"):
        tokembed.evaluate(tmp_path / "run", lengths=[0])
    with pytest.raises(ValueError, match=r"unknown positional scheme 'xpos'"):
        PositionsExperiment(data="d", out="o", schemes=("rope", "xpos"))
    with pytest.raises(ValueError, match=r"schemes has duplicates"):
        PositionsExperiment(data="d", out="o", schemes=("rope", "rope"))
    with pytest.raises(ValueError, match=r"multiples must be integers >= 1, got \(1, 0\)"):
        PositionsExperiment(data="d", out="o", multiples=(1, 0))
    with pytest.raises(ValueError, match=r"evaluation must be one of nonoverlapping, sliding, got 'strided'"):
        tokembed.evaluate(tmp_path / "run", lengths=[16], evaluation="strided")
    with pytest.raises(
        ValueError,
        match=r"stride=4 \(--stride\) applies to the sliding evaluation; pass evaluation=.sliding. \(--sliding\)",
    ):
        tokembed.evaluate(tmp_path / "run", lengths=[16], stride=4)
    with pytest.raises(ValueError, match=r"rope_scaling entries must be among linear, ntk, yarn, llama3, got 'x'"):
        PositionsExperiment(data="d", out="o", rope_scaling=("x",))


@pytest.mark.parametrize("positional", ["rope", "alibi", "sinusoidal"])
@pytest.mark.parametrize("length, stride", [(16, 8), (16, 1), (32, 5), (16, 16)])
def test_sliding_evaluation_equals_its_definition(positional, length, stride):
    # Written from the definition with the plain forward and F.cross_entropy: window k starts at k*stride
    # and its last `stride` predictions are scored (each with >= length - stride tokens of context).
    from tokembed.training.evaluation import evaluate_tokens

    torch.manual_seed(0)
    model = tokembed.GPT(
        GPTConfig(vocab_size=40, context_length=16, dim=16, n_layers=1, n_heads=2, positional=positional)
    )
    tokens = torch.randint(0, 40, (200,))
    got = evaluate_tokens(model, tokens, length=length, stride=stride, batch_size=3, max_windows=7)
    nll, n = 0.0, 0
    with torch.no_grad():
        for k in range(7):
            w = tokens[k * stride : k * stride + length + 1]
            logits = model(w[None, :-1])[0, -stride:]  # (S,V)
            nll += torch.nn.functional.cross_entropy(logits, w[-stride:], reduction="sum").item()
            n += stride
    assert got["tokens"] == n and got["windows"] == 7 and got["stride"] == stride
    assert got["loss"] == pytest.approx(nll / n, rel=1e-5)


def test_cli_resume_on_other_data_is_refused(tmp_path, capsys):
    train(cfg(tmp_path, max_steps=1, **BYTES), SHAPE, progress=False)
    other = tmp_path / "other.txt"
    other.write_text("hello " * 200)
    assert main(["train", str(other), "--out", str(tmp_path / "run"), "--resume", "--quiet"]) == 2
    assert "--resume: the checkpoint was trained on" in capsys.readouterr().err


def test_a_stop_beyond_the_last_step_is_an_error_naming_both(tmp_path):
    with pytest.raises(
        ValueError, match=r"stop_at \(--stop-at\) 7 is beyond the run's last step, max_steps \(--steps\) 6"
    ):
        train(cfg(tmp_path), TINY, progress=False, stop_at=7)
    assert not (tmp_path / "run").exists()  # refused before anything is written
