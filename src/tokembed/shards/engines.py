"""Where units are tokenized: a local process pool (or this process), or Ray tasks. Same bytes either way.

An engine takes parts to tokenize (`tokembed.shards.units.tokenize_unit`) and hands back finished ones:
``submit(part, config, names) -> future``, ``wait_one(pending) -> (future, tag)`` for a list of
``(future, tag)`` pairs, ``capacity`` (parts worth keeping in flight) and ``close(cancel=)``.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any

from tokembed.shards.config import PrepareConfig
from tokembed.shards.ray_start import RAY_START_SECONDS, RayStart, check_loopback
from tokembed.shards.units import tokenize_unit

__all__ = ["ENGINES", "RAY_START_SECONDS", "make_engine"]

ENGINES = ("local", "ray")
SHUTDOWN_SECONDS = 30.0  # an interrupted run waits at most this long for the parts its workers hold


def _watch_parent(parent: int) -> None:
    # A worker whose parent was killed (kill -9) exits instead of lingering.
    def loop():
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=loop, daemon=True).start()


def _worker_init(parent: int, config: PrepareConfig, registration: Any = None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's to handle: it stops the workers
    _watch_parent(parent)
    from tokembed.tokenizer.fast import token_encoder
    from tokembed.tokenizer.registry import restore_registration

    restore_registration(registration)  # a tokenizer registered in the parent, for a worker started by spawn
    token_encoder(config.build_tokenizer(), config.backend)  # build once per process, before the first unit


def _registration(config: PrepareConfig) -> Any:
    """The parent's registration of the config's tokenizer, for workers that do not inherit it (None if none)."""
    from tokembed.tokenizer.registry import registration_for_workers

    return registration_for_workers(config.tokenizer)


def _ray_tokenize_unit(unit, config: PrepareConfig, names, registration: Any) -> dict[str, Any]:
    from tokembed.tokenizer.registry import restore_registration

    restore_registration(registration)  # Ray's workers never saw this process's registrations
    return tokenize_unit(unit, config, names)


def _start_method() -> str:
    """How worker processes start: ``TOKEMBED_START_METHOD`` or, on Linux, "fork".

    fork starts a worker in milliseconds with the tokenizer already built (copy-on-write); spawn must
    import tokembed (and torch) again in every worker, seconds each, which on a small machine costs more
    than the tokenizing of a 100 MB corpus gains from a second core. The workers only run numpy, hashlib,
    json and tiktoken, never torch, and the progress bar's monitor thread is off, so forking is safe here.
    Elsewhere (macOS, Windows) spawn is the only safe choice.
    """
    method = os.environ.get("TOKEMBED_START_METHOD")
    if method:
        if method not in ("fork", "spawn", "forkserver"):
            raise ValueError(f"TOKEMBED_START_METHOD must be fork, spawn or forkserver, got {method!r}")
        return method
    return "fork" if sys.platform.startswith("linux") else "spawn"


class _LocalEngine:
    def __init__(self, workers: int, config: PrepareConfig):
        self.workers = workers
        self.pool = None
        if workers > 1:
            import multiprocessing as mp
            from concurrent.futures import ProcessPoolExecutor

            method = _start_method()
            registration = _registration(config) if method != "fork" else None  # a forked worker inherits it
            self.pool = ProcessPoolExecutor(
                workers,
                mp_context=mp.get_context(method),
                initializer=_worker_init,
                initargs=(os.getpid(), config, registration),
            )
            # Fork the workers now, while this process is small: pages it holds at fork time and frees later
            # (a Parquet reader's buffers) would otherwise stay behind in every worker as private copies.
            self.pool.submit(int).result()

    @property
    def capacity(self) -> int:
        return 2 * self.workers if self.pool else 1

    @property
    def in_process(self) -> bool:
        """Units are tokenized in this process, one at a time."""
        return self.pool is None

    def submit(self, unit, config, names):
        if self.pool is None:
            return _Done(tokenize_unit(unit, config, names))
        return self.pool.submit(tokenize_unit, unit, config, names)

    def wait_one(self, pending: list):
        from concurrent.futures import FIRST_COMPLETED, wait

        if self.pool is None:
            return pending[0]
        done, _ = wait([f for f, _ in pending], return_when=FIRST_COMPLETED)
        return next(p for p in pending if p[0] in done)

    def close(self, cancel: bool = False):
        if self.pool is None:
            return
        if not cancel:
            self.pool.shutdown(wait=True)
            return
        # Interrupted or failed: queued parts are dropped and each worker finishes the part it holds (about
        # PART_BYTES, a second or less), then exits. Terminating a worker instead may cut its result in half
        # on the pipe, and the pool's manager thread then waits for the rest forever: the process hangs at
        # exit. Workers ignore SIGINT (`_worker_init`) so that Ctrl-C cannot cut them either.
        procs = list((getattr(self.pool, "_processes", None) or {}).values())
        self.pool.shutdown(wait=False, cancel_futures=True)
        deadline = time.monotonic() + SHUTDOWN_SECONDS
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():  # stuck (say, on a hung network file system): stop it rather than wait forever
                p.kill()


class _Done:
    def __init__(self, value):
        self.value = value

    def result(self):
        return self.value


class _RayEngine:
    def __init__(self, workers: int, address: str | None, config: PrepareConfig, start_timeout: float):
        try:
            import ray
        except ImportError:
            raise ImportError("--engine ray needs Ray: pip install 'tokembed[ray]'") from None
        self.ray = ray
        self.start: RayStart | None = None
        if not ray.is_initialized():  # else a Ray session the caller started: theirs to end
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            if address:
                kwargs["address"] = address
            elif workers > 0:
                kwargs["num_cpus"] = workers
            if not (address or "").startswith("ray://"):  # a Ray Client driver needs no Ray of its own here
                check_loopback()  # else Ray would retry for many minutes
            self.start = RayStart(ray, kwargs, start_timeout, address)  # at most start_timeout seconds
        try:
            self.task = ray.remote(num_cpus=1)(_ray_tokenize_unit)
            self.registration = _registration(config)
            self.workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
        except BaseException:
            self.close(cancel=True)
            raise

    @property
    def capacity(self) -> int:
        # The driver reads and ships every unit: more than 64 in flight only costs memory.
        return min(2 * self.workers, 64)

    in_process = False  # units go to Ray's workers

    def submit(self, unit, config, names):
        return _RayFuture(self.ray, self.task.remote(unit, config, names, self.registration))

    def wait_one(self, pending: list):
        ready, _ = self.ray.wait([f.ref for f, _ in pending], num_returns=1)
        return next(p for p in pending if p[0].ref == ready[0])

    def close(self, cancel: bool = False):
        if self.start is not None:  # a Ray session we started ends with us; one the caller started is theirs
            self.ray.shutdown()
            self.start.release()


class _RayFuture:
    def __init__(self, ray, ref):
        self.ray, self.ref = ray, ref

    def result(self):
        try:
            return self.ray.get(self.ref)
        except self.ray.exceptions.RayTaskError as e:
            if isinstance(getattr(e, "cause", None), (ValueError, TypeError, OSError)):
                raise e.cause from None  # bad input: the same message as the local engine
            raise


def make_engine(
    engine: str,
    *,
    workers: int,
    config: PrepareConfig,
    ray_address: str | None = None,
    ray_start_timeout: float = RAY_START_SECONDS,
):
    """The engine called ``engine`` (one of `ENGINES`) with ``workers`` processes (or Ray CPUs).

    For ``"ray"``: a new Ray session (local, or joining the cluster at ``ray_address``) must start within
    ``ray_start_timeout`` seconds, else `TimeoutError`; `ConnectionError` at once where Ray cannot run at all (no
    loopback interface). See `tokembed.shards.ray_start`.
    """
    if engine == "ray":
        return _RayEngine(workers, ray_address, config, ray_start_timeout)
    return _LocalEngine(workers, config)
