"""SIGTERM (Slurm, Kubernetes, spot preemption) does what the first Ctrl-C does: finish the step, save it, stop.

Was (issue 24 items 1 and 5): ``kill -TERM`` of ``tokembed train`` ended it at once with nothing saved since the
last checkpoint; under torchrun every rank died the same way; and the Ctrl-C message did not say at which step
the run stopped nor how to resume it.

In the CLI tests the printed resume command is run as printed (``tokembed`` and ``torchrun`` resolved beside
this Python), and the resumed run's losses must equal the uninterrupted run's.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import STORY
from tokembed import GPTConfig, TrainConfig, train
from tokembed.training.config import lr_at as loop_lr_at
from tokembed.training.interrupt import DeferredInterrupt, TrainingInterrupted

TORCHRUN = Path(sys.executable).with_name("torchrun")
TINY = GPTConfig(context_length=16, dim=16, n_layers=1, n_heads=2)
STEPS = 30
STOPPED = re.compile(
    r"^tokembed train: stopped by (SIG\w+) after step (\d+); the checkpoint (\S+) holds it\. Resume with: (.+)$", re.M
)


def losses(out) -> tuple[list, list]:
    log = json.loads((Path(out) / "log.json").read_text())
    return [(e["step"], e["loss"]) for e in log["train"]], [(e["step"], e["loss"]) for e in log["val"]]


def saved_step(out) -> int:
    return json.loads((Path(out) / "state.json").read_text())["step"]


def test_sigterm_in_python_stops_at_a_step_boundary_and_resumes_exactly(tmp_path, monkeypatch):
    kw = dict(data=str(STORY), max_length=16, batch_size=4, max_steps=12, eval_interval=5, eval_batches=2)
    kw["tokenizer"] = "bytes"  # a 257-row table: five times faster than 50,257, and the signal is what is tested
    tiny = {"context_length": 16, "dim": 16, "n_layers": 1, "n_heads": 2}
    train(TrainConfig(out=str(tmp_path / "ref"), **kw), tiny, progress=False)
    previous = signal.signal(signal.SIGTERM, lambda *_: None)  # if train does not take it, pytest must not die

    def lr_at(step: int, config) -> float:  # called as each step starts: the signal lands inside step 8
        if step == 7:
            os.kill(os.getpid(), signal.SIGTERM)
        return loop_lr_at(step, config)

    monkeypatch.setattr("tokembed.training.loop.lr_at", lr_at)
    try:
        with pytest.raises(TrainingInterrupted) as stopped:
            train(TrainConfig(out=str(tmp_path / "cut"), **kw), tiny, progress=False)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert isinstance(stopped.value, KeyboardInterrupt)  # what a Ctrl-C raised before: callers that catch it still do
    assert (stopped.value.signal, stopped.value.step, saved_step(tmp_path / "cut")) == (signal.SIGTERM, 8, 8)
    assert str(stopped.value) == f"stopped by SIGTERM after step 8; the checkpoint {tmp_path / 'cut'} holds it"
    assert signal.getsignal(signal.SIGTERM) is previous  # handed back
    monkeypatch.undo()
    train(TrainConfig(out=str(tmp_path / "cut"), **kw), resume=True, progress=False)
    assert losses(tmp_path / "cut") == losses(tmp_path / "ref")


@pytest.mark.slow  # waits out the 1 s in which a signal counts as a copy: ~4 s of sleeping
def test_copies_of_one_request_are_one_and_a_later_ctrl_c_stops_at_once():
    """torchrun forwards a terminal's Ctrl-C to ranks that got it already, and Slurm's SIGTERM reaches every
    process: such copies must not turn into "stop at once" (which would lose the step being saved)."""
    with DeferredInterrupt() as interrupt:
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)  # the forwarded copy, milliseconds later
        assert interrupt.signal == signal.SIGINT
        time.sleep(1.1)
        with pytest.raises(KeyboardInterrupt, match="a second SIGINT"):  # a person pressing Ctrl-C again
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)  # (delivered at the next bytecode)
    with DeferredInterrupt() as interrupt:
        for _ in range(3):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.6)
        assert interrupt.signal == signal.SIGTERM  # SIGKILL is how a scheduler stops at once


# ----------------------------------------------------------------------------------------------- the CLI


def cli(out, *extra) -> list[str]:
    return [
        "train", str(STORY), "--out", str(out), "--dim", "16", "--layers", "1", "--heads", "2", "--max-length", "16",
        "--batch-size", "4", "--steps", str(STEPS), "--eval-interval", "5", "--eval-batches", "2",
        "--checkpoint-interval", "1000", "--warmup-steps", "2", "--device", "cpu", "--log-every", "1", *extra,
    ]  # fmt: skip


def env() -> dict:
    return dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")


def runnable(command: str) -> list[str]:
    """The printed command with ``tokembed`` and ``torchrun`` as installed beside this Python."""
    words = shlex.split(command)
    if words[0] == "torchrun":
        return [str(TORCHRUN), *words[1:]]
    assert words[0] == "tokembed"
    return [sys.executable, "-m", "tokembed", *words[1:]]


def signal_at_step(cmd: list[str], step: int, send) -> tuple[int, str, float]:
    """Start ``cmd`` (in a process group of its own), call ``send(proc)`` once its log shows ``step``; return
    its exit status, its log and how long it took to stop after the signal."""
    proc = subprocess.Popen(
        cmd, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env(), start_new_session=True
    )
    seen = []
    for line in proc.stderr:
        seen.append(line)
        m = re.match(r"train: step (\d+)/", line)
        if m and int(m.group(1)) >= step:
            break
    sent = time.monotonic()
    send(proc)
    out, err = proc.communicate(timeout=120)
    return proc.returncode, "".join(seen) + err + out, time.monotonic() - sent


@pytest.mark.slow
def test_kill_term_of_the_cli_saves_that_step_and_prints_the_resume_command(tmp_path):
    reference = tmp_path / "ref"
    subprocess.run([sys.executable, "-m", "tokembed", *cli(reference)], check=True, capture_output=True, env=env())
    out = tmp_path / "run"
    rc, log, took = signal_at_step([sys.executable, "-m", "tokembed", *cli(out)], 5, lambda p: p.terminate())
    assert rc == 128 + signal.SIGTERM, log
    name, step, where, command = STOPPED.search(log).groups()
    assert name == "SIGTERM" and 5 <= int(step) < STEPS and where == str(out) and saved_step(out) == int(step)
    assert took < 30  # one step and one save (Slurm's and Kubernetes' default grace is 30 s)
    assert runnable(command) == [sys.executable, "-m", "tokembed", *cli(out), "--resume"]
    subprocess.run(runnable(command), check=True, capture_output=True, env=env())
    assert losses(out) == losses(reference)


@pytest.mark.slow
def test_ctrl_c_names_the_step_and_the_resume_command(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "tokembed", *cli(out, "--resume", "auto")]
    rc, log, _ = signal_at_step(cmd, 3, lambda p: p.send_signal(signal.SIGINT))
    assert rc == 130, log
    name, step, _, command = STOPPED.search(log).groups()
    assert name == "SIGINT" and saved_step(out) == int(step)
    assert runnable(command) == cmd  # it already resumes by itself


def rank_pids(proc: subprocess.Popen) -> dict[int, int]:
    """torchrun's worker processes by rank (from their environment)."""
    pids = {}
    for task in Path(f"/proc/{proc.pid}/task").iterdir():
        for pid in (task / "children").read_text().split():
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            rank = next((int(e[5:]) for e in environ if e.startswith(b"RANK=")), None)
            if rank is not None:
                pids[rank] = int(pid)
    return pids


@pytest.fixture(scope="module")
def torchrun_reference(tmp_path_factory) -> tuple[list, list]:
    out = tmp_path_factory.mktemp("torchrun") / "ref"
    subprocess.run([*TORCHRUN_2, *cli(out)], check=True, capture_output=True, env=env(), timeout=300)
    return losses(out)


TORCHRUN_2 = [str(TORCHRUN), "--standalone", "--nproc_per_node", "2", "-m", "tokembed"]


@pytest.mark.slow
@pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun is not installed next to this Python")
@pytest.mark.parametrize("who", ["torchrun", "every process", "rank 1 alone"])
def test_kill_term_under_torchrun_stops_every_rank_at_the_same_step(tmp_path, who, torchrun_reference):
    """SIGTERM to torchrun (Kubernetes signals PID 1) reaches every rank; to every process (Slurm), each rank
    gets it twice (torchrun forwards it again); to one rank alone, that rank makes the others stop with it."""
    torchrun, out = TORCHRUN_2, tmp_path / "run"

    def send(proc: subprocess.Popen) -> None:
        if who == "torchrun":
            proc.terminate()
        elif who == "every process":
            os.killpg(proc.pid, signal.SIGTERM)
        else:
            os.kill(rank_pids(proc)[1], signal.SIGTERM)

    rc, log, took = signal_at_step([*torchrun, *cli(out)], 5, send)
    assert rc != 0, log
    name, step, where, command = STOPPED.search(log).groups()
    assert name == "SIGTERM" and where == str(out) and saved_step(out) == int(step) and 5 <= int(step) < STEPS, log
    assert took < 30, log  # no rank waits for another at a collective: they stopped together
    assert runnable(command) == [*torchrun, *cli(out), "--resume"]
    subprocess.run(runnable(command), check=True, capture_output=True, env=env(), timeout=300)
    assert losses(out) == torchrun_reference
