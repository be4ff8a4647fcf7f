"""How many CPUs this process may use, and how many worker processes that allows.

``os.cpu_count()`` counts the machine's CPUs; a container or a job scheduler gives a process fewer: a CPU
affinity mask (``taskset``, Slurm's ``--cpus-per-task``, ``os.sched_getaffinity``) and a cgroup CPU quota
(Docker's ``--cpus``, a Kubernetes CPU limit: ``cpu.max`` in cgroup v2, ``cpu.cfs_quota_us`` /
``cpu.cfs_period_us`` in v1). A pool sized by the machine's count oversubscribes the quota: the workers
are throttled, and each holds its own memory.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from tokembed._checks import check_int

__all__ = ["MAX_WORKERS_PER_CPU", "available_cpus", "check_workers"]

MAX_WORKERS_PER_CPU = 4  # tokenizing is CPU-bound: beyond this, workers add memory (a process each), not speed


def _cgroup_quota(root: Path) -> float | None:
    """The CPU quota of this process's cgroup in CPUs (``1.5`` for 150 ms per 100 ms), or None when unlimited."""
    candidates: list[tuple[Path, Path | None]] = [(root / "cpu.max", None)]  # v2: "max 100000" or "150000 100000"
    candidates += [(root / d / "cpu.cfs_quota_us", root / d / "cpu.cfs_period_us") for d in ("cpu", "cpu,cpuacct")]
    for quota_file, period_file in candidates:
        try:
            if period_file is None:
                quota, period = quota_file.read_text().split()[:2]
            else:
                quota, period = quota_file.read_text().strip(), period_file.read_text().strip()
            if quota in ("max", "-1"):
                return None
            return int(quota) / int(period)
        except (OSError, ValueError):
            continue
    return None


def available_cpus(*, cgroup: str | os.PathLike = "/sys/fs/cgroup") -> int:
    """The CPUs this process may use: its affinity mask, bounded by its cgroup's CPU quota (rounded up), at least 1.

    Args:
        cgroup: where the cgroup file system is mounted (the default is Linux's).
    """
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # macOS, Windows: no affinity mask
        cpus = os.cpu_count() or 1
    quota = _cgroup_quota(Path(cgroup))
    if quota is not None and quota > 0:
        cpus = min(cpus, math.ceil(quota))
    return max(1, cpus)


def check_workers(workers: object, *, name: str = "workers") -> int:
    """``workers`` as a number of worker processes: 0 means `available_cpus`; more than
    ``MAX_WORKERS_PER_CPU`` per available CPU is refused (``--workers 99999`` forked until memory ran out)."""
    n = check_int(name, workers, min=0, noun="an integer", hint="0 = one per available CPU")
    cpus = available_cpus()
    if n == 0:
        return cpus
    if n > MAX_WORKERS_PER_CPU * cpus:
        raise ValueError(
            f"{name}={n} is more processes than this machine can run usefully: {cpus} CPU(s) are available to this "
            f"process (its CPU affinity and cgroup quota), and each worker is a process with its own memory; "
            f"use at most {MAX_WORKERS_PER_CPU * cpus} (0, the default, starts one per available CPU)"
        )
    return n
