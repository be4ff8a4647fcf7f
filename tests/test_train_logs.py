"""Progress without a terminal: plain log lines at a steady rate; with one, progress bars.

Was (issue 24 item 3): under nohup, Slurm or ``kubectl logs`` (stderr not a terminal) ``train`` printed nothing
until it ended and ``eval`` nothing at all, while the Python ``train()`` wrote a progress bar's every redraw
(carriage returns) into the log.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from conftest import STORY
from tokembed import TrainConfig, train
from tokembed.cli import main

# The story as bytes (257 ids): what is tested is the log, and a 257-row table trains five times faster than 50,257.
SMALL = ["--dim", "16", "--layers", "1", "--heads", "2", "--max-length", "16", "--batch-size", "4", "--tokenizer", "bytes"]  # fmt: skip
STEP_LINE = re.compile(
    r"^train: step (\d+)/(\d+) \(\d+%\) \| loss (\d+\.\d{4}) \| [\d,]+ tok/s \| elapsed \S+ \| ETA \S+$", re.M
)


def cli_train(out, *extra) -> list[str]:
    return ["train", str(STORY), "--out", str(out), *SMALL, "--steps", "6", "--eval-interval", "3", *extra]


def test_without_a_terminal_train_logs_plain_lines_every_n_steps(tmp_path, capsys):
    assert main(cli_train(tmp_path / "run", "--eval-batches", "1", "--log-every", "2")) == 0
    err = capsys.readouterr().err
    assert "\r" not in err and "\x1b" not in err  # no bar redraws, no terminal codes
    assert [int(m.group(1)) for m in STEP_LINE.finditer(err)] == [1, 2, 4, 6]  # the first step, then every 2
    assert re.search(r"^train: step 3: validation loss \d+\.\d{4}$", err, re.M)
    assert re.search(r"^train: step 6: validation loss \d+\.\d{4}$", err, re.M)
    assert err.splitlines()[0].startswith(f"training into {tmp_path / 'run'}: GPT with ")


def test_log_every_seconds_and_bad_values(tmp_path, capsys):
    assert main(cli_train(tmp_path / "run", "--log-every", "1h")) == 0  # only the first and the last step
    assert [int(m.group(1)) for m in STEP_LINE.finditer(capsys.readouterr().err)] == [1, 6]
    for bad in ("0", "-3", "2x", "s"):
        with pytest.raises(SystemExit):
            main(cli_train(tmp_path / "bad", "--log-every", bad))
        assert "--log-every: expected a number of steps (50) or of seconds (30s, 2m, 1h)" in capsys.readouterr().err


def test_without_a_terminal_eval_logs_a_line_per_length(tmp_path, capsys):
    assert main(cli_train(tmp_path / "run", "--quiet", "--context-length", "32")) == 0
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "run"), "--lengths", "16,32", "--max-windows", "3"]) == 0
    err = capsys.readouterr().err
    for length in (16, 32):
        assert re.search(rf"^eval: length {length}: loss \d+\.\d{{4}}, perplexity [\d.]+ \(3 windows\)", err, re.M)
    assert main(["eval", str(tmp_path / "run"), "--lengths", "16", "--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_python_train_never_writes_bar_redraws_into_a_log(tmp_path, capsys):
    config = TrainConfig(
        data=str(STORY), out=str(tmp_path / "py"), max_length=16, batch_size=4, max_steps=12, tokenizer="bytes"
    )
    train(config, {"context_length": 16, "dim": 16, "n_layers": 1, "n_heads": 2})  # progress=True, the default
    err = capsys.readouterr().err
    assert "\r" not in err
    assert len(err.splitlines()) < 10  # the start, the first step, the evaluations and the end: no flood
    assert [int(m.group(1)) for m in STEP_LINE.finditer(err)][-1] == 12


@pytest.mark.slow
def test_train_under_nohup_writes_lines_to_the_file_and_a_bar_to_a_terminal(tmp_path):
    import fcntl
    import pty
    import struct
    import termios

    cmd = [sys.executable, "-m", "tokembed", *cli_train(tmp_path / "file", "--log-every", "3")]
    with open(tmp_path / "log.txt", "w") as log:  # as nohup, Slurm and kubectl logs see it
        subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, check=True)
    text = (tmp_path / "log.txt").read_text()
    assert [int(m.group(1)) for m in STEP_LINE.finditer(text)] == [1, 3, 6] and "\r" not in text
    assert re.search(r"^step 6: train loss \d+\.\d{4}, validation loss \d+\.\d{4}; checkpoint", text, re.M)

    leader, follower = pty.openpty()  # a terminal (120 columns): the bar as before, and no log lines
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    cmd = [sys.executable, "-m", "tokembed", *cli_train(tmp_path / "tty")]
    proc = subprocess.Popen(cmd, stdout=follower, stderr=follower, stdin=subprocess.DEVNULL)
    os.close(follower)
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the terminal closed: the process ended
            break
        if not chunk:
            break
        seen += chunk
    assert proc.wait(timeout=120) == 0
    os.close(leader)
    shown = seen.decode(errors="replace")
    assert "\r" in shown and re.search(r"train: +\d+%\|", shown) and "| elapsed" not in shown
