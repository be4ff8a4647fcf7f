"""Starting Ray never hangs ``prepare --engine ray`` (issue 24 item 24).

Was: in a network namespace whose loopback interface is down, ``tokembed prepare --engine ray`` hung (Ray 2.60's
``ray.init`` retries 20 times, up to 40 s each, and then more) while holding the output folder's lock.

Every run here is a real ``tokembed`` process and a real Ray: without a loopback interface (``unshare --user
--map-root-user --net``: a new network namespace, whose ``lo`` is down; no root needed, nothing of the machine's
touched), past a too-short ``--ray-start-timeout``, against an address where no Ray listens, and a normal start.
Each gets its own ``RAY_TMPDIR``, so that the Ray processes it started can be found afterwards by their command
lines: none may be left.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from conftest import STORY
from tokembed.shards.prepare import prepare_corpus
from tokembed.shards.ray_start import RAY_START_SECONDS

needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="Ray is not installed (tokembed[ray])")


def _can_unshare_net() -> bool:
    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-rn", "true"], capture_output=True).returncode == 0


needs_netns = pytest.mark.skipif(not _can_unshare_net(), reason="no private network namespace (unshare -rn) here")


def folder_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def ray_tmp():
    """A short ``RAY_TMPDIR`` of the test's own (Ray's socket paths must stay under 107 bytes)."""
    path = tempfile.mkdtemp(prefix="tkray", dir="/tmp")
    yield path
    assert _ray_processes(path) == [], "Ray processes outlived the test"
    shutil.rmtree(path, ignore_errors=True)


def _ray_processes(ray_tmp: str, wait: float = 15.0) -> list[str]:
    """Live processes whose command line names ``ray_tmp`` (Ray's own); waits up to ``wait`` s for them to go."""
    deadline = time.monotonic() + wait
    while True:
        found = []
        for proc in Path("/proc").iterdir():
            try:
                if proc.name.isdigit() and (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                    if ray_tmp in cmd:
                        found.append(f"{proc.name}: {cmd[:200]}")
            except OSError:
                continue  # ended while being read
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def _tokembed(
    *args: str, ray_tmp: str, net: bool = True, timeout: float = 180
) -> tuple[subprocess.CompletedProcess, float]:
    """Run ``tokembed ARGS`` (with ``net=False`` in a network namespace without loopback); the process and its seconds."""
    command = [sys.executable, "-m", "tokembed", *args]
    t0 = time.monotonic()
    proc = subprocess.run(
        command if net else ["unshare", "-rn", *command],
        capture_output=True,
        text=True,
        timeout=timeout,  # the bug was a hang: fail, do not hang the suite
        env={**os.environ, "RAY_TMPDIR": ray_tmp},
    )
    return proc, time.monotonic() - t0


def _one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("tokembed prepare: error: ")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


@pytest.fixture
def story_file(tmp_path) -> Path:
    path = tmp_path / "story.txt"
    shutil.copyfile(STORY, path)
    return path


@pytest.mark.slow
@needs_ray
@needs_netns
def test_prepare_without_a_loopback_interface_fails_at_once_and_lets_go_of_the_folder(story_file, tmp_path, ray_tmp):
    out = tmp_path / "shards"
    # A start-up timeout longer than the test's bound: only the loopback check can end it in time.
    proc, seconds = _tokembed(
        "prepare", str(story_file), "--out", str(out), "--engine", "ray", "--ray-start-timeout", "600",
        ray_tmp=ray_tmp, net=False,
    )  # fmt: skip
    line = _one_error_line(proc)
    assert seconds < 60, f"took {seconds:.0f} s"
    assert "--engine ray cannot start Ray here: this machine cannot connect to itself (127.0.0.1: " in line
    assert "loopback interface is probably down" in line and "`ip link set lo up`" in line
    assert "--engine local (the same shards)" in line
    assert not (out / "manifest.json").exists() and not list(out.glob("train/*"))  # nothing half-written

    # In one process, as a library user would: the error comes, the folder is unlocked, and the same process can
    # prepare it (with the local engine, which needs no network).
    script = textwrap.dedent(
        f"""
        import fcntl, os, sys
        from tokembed.shards.prepare import prepare_corpus
        try:
            prepare_corpus([{str(story_file)!r}], {str(out)!r}, engine="ray")
        except ConnectionError as e:
            print("refused:", e)
        fd = os.open({str(out / ".tokembed.lock")!r}, os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if prepare still held it
        os.close(fd)
        prepare_corpus([{str(story_file)!r}], {str(out)!r}, workers=1)
        print("prepared")
        """
    )
    lib = subprocess.run(
        ["unshare", "-rn", sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "RAY_TMPDIR": ray_tmp},
    )
    assert lib.returncode == 0, lib.stderr
    assert lib.stdout.startswith("refused: --engine ray cannot start Ray here") and lib.stdout.endswith("prepared\n")
    prepare_corpus([story_file], tmp_path / "fresh", workers=1)
    assert folder_bytes(out) == folder_bytes(tmp_path / "fresh")  # the failed run left nothing in the way


@pytest.mark.slow
@needs_ray
def test_a_ray_start_past_its_timeout_is_given_up_and_leaves_nothing_behind(story_file, tmp_path, ray_tmp):
    out = tmp_path / "shards"
    # No Ray starts in half a second (its GCS alone takes longer): the start is given up midway.
    proc, seconds = _tokembed(
        "prepare", str(story_file), "--out", str(out), "--engine", "ray", "--ray-start-timeout", "0.5", "-q",
        ray_tmp=ray_tmp,
    )  # fmt: skip
    line = _one_error_line(proc)
    assert seconds < 60, f"took {seconds:.0f} s"
    assert "--engine ray: a local Ray did not start within 0.5 s (--ray-start-timeout), so the start was given up" in (
        line
    )
    assert "raise --ray-start-timeout" in line and "--engine local" in line
    assert _ray_processes(ray_tmp) == []  # what the start had launched ended with it
    assert not (out / "manifest.json").exists()
    with open(out / ".tokembed.lock", "rb") as f:  # nobody holds the folder
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    prepare_corpus([story_file], out, workers=1)
    prepare_corpus([story_file], tmp_path / "fresh", workers=1)
    assert folder_bytes(out) == folder_bytes(tmp_path / "fresh")


@pytest.mark.slow
@needs_ray
def test_an_address_where_no_ray_listens_is_given_up_after_the_timeout(story_file, tmp_path, ray_tmp):
    with socket.socket() as taken:  # bound, never listening: every connection to this port is refused
        taken.bind(("", 0))
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        proc, seconds = _tokembed(
            "prepare", str(story_file), "--out", str(tmp_path / "shards"), "--engine", "ray",
            "--ray-address", address, "--ray-start-timeout", "3", "-q",
            ray_tmp=ray_tmp,
        )  # fmt: skip
    line = _one_error_line(proc)
    assert 3 <= seconds < 60, f"took {seconds:.0f} s"
    assert f"--engine ray could not connect to the Ray cluster at {address} within 3 s (--ray-start-timeout)" in line
    assert f"`ray status --address {address}`" in line


@pytest.mark.slow
@needs_ray
def test_prepare_starts_its_own_ray_and_stops_it(story_file, tmp_path, ray_tmp):
    """Ray started by prepare (not by the caller) runs the whole job and is gone afterwards.

    Ray ties the processes it starts to the thread that called ``ray.init`` (Linux: they get SIGKILL when that thread
    ends), and prepare starts Ray off the main thread to bound the start: this checks that the session outlives
    the start and ends with the job.
    """
    proc, _ = _tokembed(
        "prepare", str(story_file), "--out", str(tmp_path / "ray"), "--engine", "ray", "--workers", "2",
        "--shard-mb", "0.005", ray_tmp=ray_tmp,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "not the main thread" not in proc.stderr  # Ray's note on its SIGTERM handler says nothing to a user
    prepare_corpus([story_file], tmp_path / "local", workers=1, shard_mb=0.005)
    assert len(list((tmp_path / "local" / "train").iterdir())) > 2  # several units: several Ray tasks
    assert folder_bytes(tmp_path / "ray") == folder_bytes(tmp_path / "local")
    assert _ray_processes(ray_tmp) == []


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        (0, ValueError, r"ray_start_timeout must be a number of seconds > 0, got 0"),
        (-5.0, ValueError, r"ray_start_timeout must be a number of seconds > 0, got -5.0"),
        (float("nan"), ValueError, r"ray_start_timeout must be a number of seconds > 0, got nan"),
        ("60", TypeError, r"ray_start_timeout must be a number of seconds > 0, got '60' \(str\)"),
    ],
)
def test_a_bad_ray_start_timeout_is_refused_before_the_folder_is_touched(story_file, tmp_path, value, error, match):
    out = tmp_path / "shards"
    with pytest.raises(error, match=match):
        prepare_corpus([story_file], out, engine="ray", ray_start_timeout=value)
    assert not out.exists()


def test_the_cli_ray_start_timeout_defaults_to_the_librarys(story_file, tmp_path, capsys):
    from tokembed.cli import build_parser, main

    args = build_parser().parse_args(["prepare", str(story_file), "--out", str(tmp_path / "o")])
    assert args.ray_start_timeout == RAY_START_SECONDS == 60
    assert main(["prepare", str(story_file), "--out", str(tmp_path / "o"), "--ray-start-timeout", "0"]) == 2
    assert (
        "tokembed prepare: error: ray_start_timeout must be a number of seconds > 0, got 0" in capsys.readouterr().err
    )
