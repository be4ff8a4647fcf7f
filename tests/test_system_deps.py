"""scripts/system-deps.sh waits for apt's locks instead of failing at once (issue 24 item 14).

Was: ``make test``'s system-package step failed on a fresh machine because another process (unattended-upgrades,
cloud-init) held the apt lock. The tests hold apt's real locks (fcntl, as apt takes them) for a few seconds and
run the script's own functions against the real apt-get: the install of a package that is already there (no
download), and an update of an empty source list into a scratch lists folder (no network, the machine's lists
untouched).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "system-deps.sh"
HOLD = 3.0  # seconds another process keeps the lock

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("apt-get") is None, reason="apt-get is Debian's and Ubuntu's"),
]


def hold(path: Path, seconds: float) -> threading.Event:
    """Take apt's fcntl lock on ``path`` now and release it after ``seconds`` (in a thread of this process)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o640)
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    released = threading.Event()

    def release():
        time.sleep(seconds)
        os.close(fd)
        released.set()

    threading.Thread(target=release, daemon=True).start()
    return released


def run(call: str) -> tuple[subprocess.CompletedProcess, float]:
    start = time.perf_counter()
    proc = subprocess.run(["bash", "-c", f"source {SCRIPT}; {call}"], capture_output=True, text=True, timeout=120)
    return proc, time.perf_counter() - start


def scratch_apt(tmp_path: Path) -> str:
    (tmp_path / "lists" / "partial").mkdir(parents=True)
    (tmp_path / "parts").mkdir()
    (tmp_path / "sources.list").write_text("")
    return (
        f"-o Dir::State::Lists={tmp_path / 'lists'} -o Dir::Etc::SourceList={tmp_path / 'sources.list'} "
        f"-o Dir::Etc::SourceParts={tmp_path / 'parts'}"
    )


def test_update_waits_while_another_process_holds_the_lists_lock(tmp_path):
    options = scratch_apt(tmp_path)
    released = hold(tmp_path / "lists" / "lock", HOLD)
    plain = subprocess.run(f"apt-get -qq {options} update", shell=True, capture_output=True, text=True)
    assert plain.returncode != 0 and "Could not get lock" in plain.stderr  # apt alone gives up at once
    proc, took = run(f"apt_update {options}")
    assert proc.returncode == 0, proc.stderr
    assert released.is_set() and took >= HOLD - 1
    assert "another process holds apt's lock; waiting" in proc.stderr


def test_update_gives_up_after_the_wait_naming_the_lock(tmp_path):
    options = scratch_apt(tmp_path)
    hold(tmp_path / "lists" / "lock", HOLD)
    proc, took = run(f"APT_WAIT=1 apt_update {options}")
    assert proc.returncode != 0 and "Could not get lock" in proc.stderr and took < HOLD + 5


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("chromium") is None, reason="needs root and chromium installed")
def test_install_waits_for_the_dpkg_lock():
    released = hold(Path("/var/lib/dpkg/lock-frontend"), HOLD)
    proc, took = run("apt_install chromium")  # already installed: nothing is downloaded
    assert proc.returncode == 0, proc.stderr
    assert released.is_set() and took >= HOLD - 1
