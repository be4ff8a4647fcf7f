"""Starting Ray for ``--engine ray`` without hanging: a loopback check, a deadline, nothing left behind.

``ray.init`` has no deadline of its own. Where Ray cannot reach its own processes (a container or network
namespace whose loopback interface is down) or the cluster at ``--ray-address`` does not answer, it retries
for many minutes (Ray 2.60: 20 tries of up to 40 s each), and ``tokembed prepare`` holds its output folder's
lock all that time. So:

- `check_loopback` first: Ray's processes and its driver talk over TCP on this machine, which goes through the
  loopback interface whatever address they use. When a connection to a listener on 127.0.0.1 fails, no Ray can
  start here, and the error says so at once.
- `RayStart` runs ``ray.init`` in a thread of its own and waits at most ``timeout`` seconds for it; then it raises
  `TimeoutError` saying what to do, and the caller (``prepare``) lets go of the folder. The start goes on in its
  thread, with no one waiting: if it completes, the thread shuts that Ray down; if it fails, the thread ends, and the
  kernel stops the processes it had launched (below); in ``tokembed prepare`` the process exits at once, and they stop
  with it. Killing them instead would be worse: Ray's GCS client, already connected inside ``ray.init``, ends the
  whole process 60 s after its GCS disappears (Ray 2.60). A start that completes just as it is given up is kept.

The thread lives as long as the Ray session: on Linux Ray binds each process it starts to the *thread* that started
it (``PR_SET_PDEATHSIG``, which fires when that thread ends), so a thread that returned after ``ray.init`` would take
the session with it. It waits for `RayStart.release`; the engine calls that after ``ray.shutdown()``. A second start
in the same process first waits (within its own timeout) for a given-up one to end: two ``ray.init`` at once in one
process would share Ray's global state.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import Any

__all__ = ["RAY_START_SECONDS", "RayStart", "check_loopback"]

RAY_START_SECONDS = 60.0  # the default deadline for starting (or connecting to) Ray; a local Ray takes seconds
LOOPBACK_SECONDS = 2.0  # a connection on this machine answers at once, or never (a firewall that drops it)


def check_loopback() -> None:
    """Raise if this machine cannot connect to itself over TCP (its loopback interface is down).

    Raises:
        ConnectionError: a connection to a listener on 127.0.0.1 fails; the message says what to do.
    """
    try:
        server = socket.create_server(("127.0.0.1", 0))
        with server, socket.create_connection(server.getsockname(), timeout=LOOPBACK_SECONDS):
            return
    except OSError as e:
        raise ConnectionError(
            f"--engine ray cannot start Ray here: this machine cannot connect to itself (127.0.0.1: {e}), which Ray's "
            "processes need, so its loopback interface is probably down (a container or network namespace). Bring it "
            "up (`ip link set lo up`; in a container, start it with a network), or use --engine local (the same shards)"
        ) from None


class _NotTheMainThread(logging.Filter):
    """Drop Ray's warning that it set no SIGTERM handler: started here off the main thread, on purpose.

    Ray's handler exits so that its atexit hook stops the session; without it SIGTERM ends the process at once, and
    the kernel stops the session's processes with it (their thread ends).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return "not the main thread" not in record.getMessage()


class RayStart:
    """``ray.init(**kwargs)`` in a thread of its own, waited for at most ``timeout`` seconds.

    Args:
        ray: the ``ray`` module.
        kwargs: ``ray.init``'s arguments.
        timeout: seconds to wait (> 0).
        address: the cluster address, if one was given (for the message).

    Raises:
        TimeoutError: Ray did not start (or connect) in time, or an earlier start given up in this process still runs.
        Exception: what ``ray.init`` raised.
    """

    _given_up: threading.Thread | None = None  # this process's last start given up, maybe still running

    def __init__(self, ray: Any, kwargs: dict[str, Any], timeout: float, address: str | None = None) -> None:
        deadline = time.monotonic() + timeout
        _wait_for_given_up(timeout)
        self._lock = threading.Lock()
        self._ready, self._released = threading.Event(), threading.Event()
        self._error: BaseException | None = None
        self._finished = self._late = False
        self._thread = threading.Thread(target=self._run, args=(ray, kwargs), name="tokembed-ray-start", daemon=True)
        self._thread.start()
        try:
            ready = self._ready.wait(max(0.0, deadline - time.monotonic()))
        except BaseException:  # Ctrl-C while waiting: no Ray is left running for no one
            if not self._give_up() and self._error is None:
                ray.shutdown()
            self.release()
            raise
        if not ready and self._give_up():
            raise TimeoutError(_timeout_message(timeout, address))
        if self._error is not None:
            self.release()
            raise self._error

    def _give_up(self) -> bool:
        """Stop waiting; False if the start has finished after all (then it counts)."""
        with self._lock:
            self._late = not self._finished
        if self._late:
            RayStart._given_up = self._thread
            self.release()
        return self._late

    def _run(self, ray: Any, kwargs: dict[str, Any]) -> None:
        quiet = _NotTheMainThread()
        logging.getLogger("ray._private.worker").addFilter(quiet)
        try:
            ray.init(**kwargs)
        except BaseException as e:  # handed to the caller (or dropped, when it gave up waiting)
            self._error = e
        finally:
            logging.getLogger("ray._private.worker").removeFilter(quiet)
        with self._lock:
            self._finished = True
            unwanted = self._late and self._error is None
        if unwanted:  # started after all, with no one waiting for it
            ray.shutdown()
        self._ready.set()
        self._released.wait()  # the session's processes live as long as this thread

    def release(self) -> None:
        """Let the thread end (after ``ray.shutdown()``: its end stops the processes it started)."""
        self._released.set()


def _wait_for_given_up(timeout: float) -> None:
    earlier = RayStart._given_up
    if earlier is None:
        return
    earlier.join(timeout)
    if earlier.is_alive():
        raise TimeoutError(
            f"--engine ray: an earlier start of Ray in this process, given up after its --ray-start-timeout, has not "
            f"ended within another {timeout:g} s; Ray cannot start twice at once in one process: wait, or start a new "
            "Python process"
        )
    RayStart._given_up = None


def _timeout_message(timeout: float, address: str | None) -> str:
    if address:
        return (
            f"--engine ray could not connect to the Ray cluster at {address} within {timeout:g} s "
            "(--ray-start-timeout), and gave up: check that the cluster is running and that this machine reaches "
            f"it (`ray status --address {address}`), or give it longer with --ray-start-timeout"
        )
    return (
        f"--engine ray: a local Ray did not start within {timeout:g} s (--ray-start-timeout), so the start was given "
        "up (the Ray processes it had launched stop with it). A busy or slow machine may need longer: raise "
        "--ray-start-timeout; if Ray never starts, its logs are under /tmp/ray/session_latest/logs (or $RAY_TMPDIR); "
        "or use --engine local (the same shards)"
    )
