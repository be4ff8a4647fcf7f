"""Worker counts: bounded with a clear message, and the default honours the CPUs a process may use (issue 24 item 11).

Was: ``--workers 99999`` forked until memory ran out (it killed another job's rank), and the default took
``os.cpu_count()``, the machine's CPUs, ignoring a container's CPU limit and the affinity mask.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import STORY
from tokembed._cpus import MAX_WORKERS_PER_CPU, available_cpus, check_workers
from tokembed.cli import main


def test_too_many_workers_are_refused_before_anything_is_made(tmp_path, capsys):
    cap = MAX_WORKERS_PER_CPU * available_cpus()
    assert main(["prepare", str(STORY), "--out", str(tmp_path / "s"), "--workers", "99999"]) == 2
    err = capsys.readouterr().err
    assert f"workers=99999 is more processes than this machine can run usefully: {available_cpus()} CPU(s)" in err
    assert f"use at most {cap}" in err
    assert not (tmp_path / "s").exists()
    with pytest.raises(ValueError, match=r"must be an integer >= 0, got -1; 0 = one per available CPU"):
        check_workers(-1)
    assert check_workers(cap) == cap


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity on this platform")
def test_the_default_follows_the_affinity_mask():
    """A process pinned to one CPU (as taskset or Slurm's --cpus-per-task does) gets one worker, not os.cpu_count()."""
    pin = "import os; os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]}); from tokembed._cpus import *;"
    run = [sys.executable, "-c", pin + "print(available_cpus(), check_workers(0))"]
    assert subprocess.run(run, capture_output=True, text=True, check=True).stdout.split() == ["1", "1"]
    proc = subprocess.run([sys.executable, "-c", pin + "check_workers(5)"], capture_output=True, text=True)
    assert proc.returncode != 0 and "1 CPU(s) are available to this process" in proc.stderr
    assert "use at most 4" in proc.stderr


@pytest.mark.parametrize(
    "files, cpus",
    [
        ({"cpu.max": "150000 100000\n"}, 2),  # cgroup v2, --cpus 1.5: rounded up
        ({"cpu.max": "100000 100000\n"}, 1),
        ({"cpu.max": "max 100000\n"}, None),  # no limit
        ({"cpu/cpu.cfs_quota_us": "50000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 1),  # cgroup v1, half a CPU
        ({"cpu,cpuacct/cpu.cfs_quota_us": "-1\n", "cpu,cpuacct/cpu.cfs_period_us": "100000\n"}, None),
        ({}, None),  # no cgroup file system
    ],
)
def test_the_default_follows_the_cgroup_quota(tmp_path, files, cpus):
    """The files as the kernel writes them (Documentation/admin-guide/cgroup-v2.rst, cpu.max: "$MAX $PERIOD")."""
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    mask = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert available_cpus(cgroup=tmp_path) == (mask if cpus is None else min(mask, cpus))
