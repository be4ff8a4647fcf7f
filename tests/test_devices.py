"""Devices, precision, torch.compile and data parallel: each checked against the plain fp32 CPU run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import STORY, TINY
from tokembed import GPTConfig, TrainConfig, load_checkpoint, train
from tokembed.cli import main
from tokembed.training.device import DeviceConfig, resolve_device

HERE = Path(__file__).resolve().parent
TORCHRUN = Path(sys.executable).with_name("torchrun")


def cfg(tmp_path, name, **kw):
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


def losses(result_or_dir) -> list[float]:
    log = result_or_dir.log if hasattr(result_or_dir, "log") else json.loads((result_or_dir / "log.json").read_text())
    return [r["loss"] for r in log["train"]]


def test_auto_picks_the_best_device_here():
    want = "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
    assert resolve_device("auto").type == want
    assert resolve_device("cpu") == torch.device("cpu")


@pytest.mark.parametrize(
    "kwargs, error, msg",
    [
        (dict(device="tpu"), ValueError, r"device must be one of auto, cpu, cuda, mps \(or cuda:N\), got 'tpu'"),
        (dict(precision="fp8"), ValueError, r"precision must be one of fp32, bf16, got 'fp8'"),
        (dict(compile="yes"), TypeError, r"compile must be True or False, got 'yes'"),
    ],
)
def test_bad_device_configs(kwargs, error, msg):
    with pytest.raises(error, match=msg):
        DeviceConfig(**kwargs)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message a machine without CUDA gives")
def test_asking_for_a_missing_gpu_says_what_to_do(tmp_path, capsys):
    with pytest.raises(ValueError, match=r"device 'cuda': torch .* sees no CUDA GPU here; use --device cpu"):
        train(cfg(tmp_path, "gpu"), TINY, progress=False, device=DeviceConfig(device="cuda"))
    assert main(["train", str(STORY), "--out", str(tmp_path / "g"), "--device", "cuda", "--steps", "1"]) == 2
    assert "no CUDA GPU here" in capsys.readouterr().err


@pytest.mark.slow
def test_bf16_autocast_trains_close_to_fp32(tmp_path):
    # bf16 keeps 8 bits of mantissa: the products differ in the third digit, the losses stay within ~1%.
    fp32 = train(cfg(tmp_path, "fp32"), TINY, progress=False, device=DeviceConfig(device="cpu"))
    bf16 = train(cfg(tmp_path, "bf16"), TINY, progress=False, device=DeviceConfig(device="cpu", precision="bf16"))
    assert losses(bf16) == pytest.approx(losses(fp32), rel=2e-2)
    assert losses(bf16) != losses(fp32)  # autocast did change the arithmetic
    assert bf16.val_loss == pytest.approx(fp32.val_loss, rel=2e-2)


@pytest.mark.slow
def test_compiled_training_equals_eager(tmp_path):
    eager = train(cfg(tmp_path, "eager", max_steps=3), TINY, progress=False, device=DeviceConfig(device="cpu"))
    compiled = train(
        cfg(tmp_path, "compiled", max_steps=3), TINY, progress=False, device=DeviceConfig(device="cpu", compile=True)
    )
    assert losses(compiled) == pytest.approx(losses(eager), rel=1e-4)  # fused kernels reorder float sums only
    weights = load_checkpoint(tmp_path / "compiled")[0].state_dict()  # the plain module's names, no _orig_mod.
    assert set(weights) == set(load_checkpoint(tmp_path / "eager")[0].state_dict())


def test_checkpoints_hold_cpu_tensors_and_resume_on_the_cpu(tmp_path):
    where = "cuda" if torch.cuda.is_available() else "cpu"  # on a GPU machine: train there, resume here
    tiny, kw = {"context_length": 16, "dim": 16, "n_layers": 1, "n_heads": 2}, {"tokenizer": "bytes"}  # 257 ids: fast
    whole = train(cfg(tmp_path, "whole", **kw), tiny, progress=False, device=DeviceConfig(device="cpu"))
    train(cfg(tmp_path, "cut", **kw), tiny, progress=False, device=DeviceConfig(device=where), stop_at=3)
    saved = torch.load(tmp_path / "cut" / "optimizer.pt", weights_only=True)  # no map_location needed
    assert saved["state"] and {t.device.type for s in saved["state"].values() for t in s.values()} == {"cpu"}
    resumed = train(cfg(tmp_path, "cut", **kw), None, resume=True, progress=False, device=DeviceConfig(device="cpu"))
    tolerance = 0 if where == "cpu" else 1e-4
    assert losses(resumed) == pytest.approx(losses(whole), rel=tolerance, abs=tolerance)


def run_torchrun(script: Path, *args: str) -> None:
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    cmd = [str(TORCHRUN), "--standalone", "--nproc_per_node", "2", str(script), *args]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun is not installed next to this Python")
def test_two_ranks_equal_one_process_with_twice_the_batch_and_resume_exactly(tmp_path):
    run_torchrun(HERE / "dist_train_script.py", str(STORY), str(tmp_path / "ddp"), "6", "2")
    plain, whole, cut = (tmp_path / "ddp" / name for name in ("plain", "whole", "cut"))
    # 2 ranks x batch 2 == 1 process x batch 4 on the same windows (the loader deals rank r the r-th half)
    one = train(cfg(tmp_path, "one", batch_size=4), TINY, progress=False, device=DeviceConfig(device="cpu"))
    assert losses(plain) == pytest.approx(losses(one), rel=1e-5)
    assert [r["loss"] for r in json.loads((plain / "log.json").read_text())["val"]] == pytest.approx(
        [r["loss"] for r in one.log["val"]], rel=1e-5
    )
    # 2 ranks with dropout, stopped at step 3 and resumed: exactly the uninterrupted run
    assert losses(cut) == losses(whole) and len(losses(cut)) == 6
    state = json.loads((whole / "state.json").read_text())
    assert state["loader"]["config"]["world_size"] == 2
    assert json.loads((whole / "config.json").read_text())["tokens_seen"] == 6 * 2 * 2 * 16  # global tokens
    assert not list((tmp_path / "ddp").glob("*.tmp-*"))  # rank 0 alone wrote, atomically


# ------------------------------------------------------------------------------- progress where slow


@pytest.mark.slow
def test_progress_bars_where_slow_and_none_in_a_pipe(tmp_path, capsys):
    from tokembed.inspection.counts import token_counts
    from tokembed.inspection.project import project_2d
    from tokembed.training.evaluation import evaluate_tokens

    model = tokembed_gpt()
    evaluate_tokens(model, torch.arange(200) % 40, length=16, progress="bar")  # True: a bar on a terminal only
    token_counts(STORY, progress=True)
    project_2d(torch.randn(12, 4), method="tsne", progress=True)
    err = capsys.readouterr().err
    assert "eval T=16" in err and "counting tokens" in err and "t-SNE of 12 points" in err
    # the CLI under pytest writes to a pipe: results, and no bar
    train(cfg(tmp_path, "run", max_steps=2), TINY, progress=False, device=DeviceConfig(device="cpu"))
    assert main(["eval", str(tmp_path / "run"), "--lengths", "16", "--max-windows", "2"]) == 0
    assert main(["eval", str(tmp_path / "run"), "--lengths", "16", "--max-windows", "2", "--sliding", "--json"]) == 0
    out = capsys.readouterr()
    assert "| 16 |" in out.out and '"stride": 8' in out.out and "eval T=" not in out.err


def tokembed_gpt():
    from tokembed import GPT

    return GPT(GPTConfig(vocab_size=40, context_length=16, dim=16, n_layers=1, n_heads=2, positional="alibi"))


def test_eval_runs_on_the_device_it_is_given(tmp_path, capsys):
    from tokembed import evaluate

    train(cfg(tmp_path, "run", max_steps=2), TINY, progress=False, device=DeviceConfig(device="cpu"))
    argv = ["eval", str(tmp_path / "run"), "--lengths", "16,32", "--max-windows", "3", "--json"]
    assert main(argv) == 0
    default = json.loads(capsys.readouterr().out)
    assert main([*argv, "--device", "cpu"]) == 0
    assert json.loads(capsys.readouterr().out) == default  # the CPU is where a loaded checkpoint runs by default
    model, config = load_checkpoint(tmp_path / "run")
    moved = []
    move = model.to
    model.to = lambda where: moved.append(where) or move(where)  # where evaluate puts the model
    assert evaluate((model, config), lengths=[16, 32], max_windows=3, device="auto") == default
    assert moved == [resolve_device("auto")]
    if not torch.cuda.is_available():
        assert main([*argv, "--device", "cuda"]) == 2
        assert "device 'cuda': torch" in capsys.readouterr().err
