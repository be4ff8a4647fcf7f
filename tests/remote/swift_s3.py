"""OpenStack Swift with its ``s3api`` middleware on loopback: the real S3 server the remote tests run against.

``start_swift(root)`` runs this file as a subprocess (``python swift_s3.py ROOT``), which

1. binds four listening sockets on ``127.0.0.1:0`` (the kernel picks free ports, so several test runs on
   one machine never collide, and no port is chosen before its socket is held);
2. writes a one-replica Swift cluster under ``ROOT``: ``swift.conf``, account/container/object rings
   naming those ports (one device each), the four servers' configs, a ``tempauth`` user
   ``test:tester`` / ``testing`` and the ``s3api`` middleware (path-style addressing, region us-east-1);
3. serves the proxy, account, container and object servers as Swift's own WSGI apps in one eventlet
   process (the layout of Swift's in-process functional tests), logging to ``ROOT/swift.log``;
4. prints ``READY <proxy port>`` and serves until SIGTERM, or until its stdin closes (the test process ended,
   even by ``kill -9``: no server outlives its tests).

Swift's object server keeps metadata in extended attributes, so ``ROOT`` must be on a filesystem that
has them (ext4, xfs, btrfs, tmpfs with user xattrs); `xattr_problem` says why a folder will not do.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ACCESS_KEY = "test:tester"  # tempauth's account:user, which s3api takes as the access key
SECRET_KEY = "testing"
REGION = "us-east-1"
SERVERS = ("proxy", "account", "container", "object")
LOG_LEVEL = os.environ.get("TOKEMBED_SWIFT_LOG_LEVEL", "WARNING")


def xattr_problem(folder: Path) -> str | None:
    """Why ``folder`` cannot hold Swift's objects (no user extended attributes), or None when it can."""
    probe = folder / ".xattr-probe"
    try:
        probe.write_bytes(b"")
        os.setxattr(probe, "user.tokembed", b"1")
        return None
    except OSError as e:
        return (
            f"{folder} has no user extended attributes ({os.strerror(e.errno or 0)}); Swift's object server needs them"
        )
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()


# ------------------------------------------------------------------------------------------- configuration

_COMMON = """[DEFAULT]
swift_dir = {etc}
devices = {srv}
mount_check = false
bind_ip = 127.0.0.1
bind_port = {port}
workers = 0
log_address = {log}
log_level = {level}
log_name = {name}
"""

_PROXY = """
[pipeline:main]
pipeline = catch_errors gatekeeper proxy-logging listing_formats copy s3api tempauth bulk slo dlo proxy-logging proxy-server

[app:proxy-server]
use = egg:swift#proxy
account_autocreate = true
allow_account_management = true

[filter:s3api]
use = egg:swift#s3api
location = {region}
dns_compliant_bucket_names = true
s3_acl = false

[filter:tempauth]
use = egg:swift#tempauth
user_test_tester = {secret} .admin

[filter:catch_errors]
use = egg:swift#catch_errors

[filter:gatekeeper]
use = egg:swift#gatekeeper

[filter:proxy-logging]
use = egg:swift#proxy_logging

[filter:listing_formats]
use = egg:swift#listing_formats

[filter:copy]
use = egg:swift#copy

[filter:bulk]
use = egg:swift#bulk

[filter:slo]
use = egg:swift#slo

[filter:dlo]
use = egg:swift#dlo
"""

_BACKEND = """
[pipeline:main]
pipeline = {name}

[app:{name}]
use = egg:swift#{name}
"""


def write_cluster(root: Path, ports: dict[str, int]) -> dict[str, Path]:
    """Configs and one-replica rings for a cluster whose servers listen on ``ports``; the config paths."""
    from swift.common.ring import RingBuilder

    etc, srv = root / "etc", root / "srv"
    (srv / "d1").mkdir(parents=True, exist_ok=True)
    etc.mkdir(parents=True, exist_ok=True)
    (etc / "swift.conf").write_text(
        "[swift-hash]\nswift_hash_path_suffix = tokembed-tests\nswift_hash_path_prefix = tokembed\n\n"
        "[storage-policy:0]\nname = gold\ndefault = yes\n"
    )
    for kind in ("account", "container", "object"):
        builder = RingBuilder(4, 1, 1)  # 16 partitions, one replica, min_part_hours 1
        builder.add_dev(
            {"id": 0, "region": 1, "zone": 1, "ip": "127.0.0.1", "port": ports[kind], "device": "d1", "weight": 1}
        )
        builder.rebalance()
        builder.get_ring().save(str(etc / f"{kind}.ring.gz"))
    confs = {}
    for name in SERVERS:
        common = _COMMON.format(etc=etc, srv=srv, port=ports[name], log=root / "log.sock", level=LOG_LEVEL, name=name)
        body = (
            _PROXY.format(region=REGION, secret=SECRET_KEY)
            if name == "proxy"
            else _BACKEND.format(name=f"{name}-server")
        )
        if name == "proxy":
            common = common.replace("workers = 0\n", "workers = 0\nclient_timeout = 60\n")
        confs[name] = etc / f"{name}-server.conf"
        confs[name].write_text(common + body.replace(f"egg:swift#{name}-server", f"egg:swift#{name}"))
    return confs


# ------------------------------------------------------------------------------------------- the server process


def _log_sink(root: Path):
    """A syslog socket (``ROOT/log.sock``) whose datagrams go to ``ROOT/swift.log``: a green thread's loop."""
    import eventlet
    from eventlet.green import socket

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(root / "log.sock"))

    def drain() -> None:
        with open(root / "swift.log", "ab", buffering=0) as out:
            while True:
                out.write(sock.recv(65536).rstrip(b"\0") + b"\n")

    eventlet.spawn_n(drain)


def _exit_with_parent() -> None:
    """Stop when the test process is gone, however it ended (kill -9 included): its end of our stdin closes."""
    from eventlet.green import os as green_os

    os.set_blocking(0, False)  # a blocking read would stall every green thread
    while green_os.read(0, 1024):
        pass
    os._exit(0)


def serve(root: Path) -> None:
    """Run the cluster under ``root`` in this process until SIGTERM (prints ``READY <proxy port>`` first)."""
    from swift.common.utils import eventlet_monkey_patch

    eventlet_monkey_patch()
    import eventlet
    from eventlet import wsgi
    from swift.common.http_protocol import SwiftHttpProtocol
    from swift.common.utils import NullLogger
    from swift.common.wsgi import check_config, loadapp

    os.environ["TZ"] = "UTC+0"  # as run_server does: Swift's times in UTC, no /etc/localtime look-ups
    time.tzset()
    root.mkdir(parents=True, exist_ok=True)
    socks = {name: eventlet.listen(("127.0.0.1", 0)) for name in SERVERS}
    confs = write_cluster(root, {name: s.getsockname()[1] for name, s in socks.items()})
    _log_sink(root)
    threads = []
    for name in ("account", "container", "object", "proxy"):
        # check_config validates the config and sets the logger up as `swift-*-server` does; the app is then
        # served as swift.common.wsgi.run_server serves it (which cannot run four times in one process: it
        # installs a new eventlet hub each time).
        _, _, global_conf, _ = check_config(str(confs[name]), f"{name}-server")
        app = loadapp(str(confs[name]), global_conf=global_conf)
        kw = {"protocol": SwiftHttpProtocol, "capitalize_response_headers": False, "socket_timeout": 60}
        threads.append(eventlet.spawn(wsgi.server, socks[name], app, NullLogger(), **kw))
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    eventlet.spawn_n(_exit_with_parent)
    eventlet.sleep(0)
    print(f"READY {socks['proxy'].getsockname()[1]}", flush=True)
    for t in threads:
        t.wait()


# ------------------------------------------------------------------------------------------- the test side


@dataclass
class SwiftS3:
    """A running server: its S3 endpoint and credentials, and how to stop it."""

    root: Path
    endpoint: str
    process: subprocess.Popen
    access_key: str = ACCESS_KEY
    secret_key: str = SECRET_KEY
    region: str = REGION
    buckets: list[str] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        """The standard AWS variables that point a client at this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": self.region,
        }

    def log(self) -> str:
        p = self.root / "swift.log"
        return p.read_text(errors="replace") if p.exists() else ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_swift(root: Path, *, timeout: float = 90.0) -> SwiftS3:
    """Start the cluster under ``root`` (a fresh folder) and wait until its proxy answers.

    Raises:
        RuntimeError: ``root`` lacks extended attributes, Swift is not installed, or the server did not
            come up within ``timeout`` seconds (the message carries its output).
    """
    root.mkdir(parents=True, exist_ok=True)
    problem = xattr_problem(root)
    if problem:
        raise RuntimeError(problem)
    try:
        import swift  # noqa: F401
    except ImportError:
        raise RuntimeError(
            "OpenStack Swift is not installed: pip install -e '.[dev]' (it is in the dev extra)"
        ) from None
    out = open(root / "launcher.out", "w+b")  # noqa: SIM115 (the child writes it while we read)
    proc = subprocess.Popen(
        [sys.executable, __file__, str(root)],
        stdin=subprocess.PIPE,  # closed when this process ends: the server then stops (see _exit_with_parent)
        stdout=subprocess.PIPE,
        stderr=out,
        start_new_session=True,
    )
    port = _wait_ready(proc, out, timeout)
    server = SwiftS3(root=root, endpoint=f"http://127.0.0.1:{port}", process=proc)
    try:
        _wait_answers(server, deadline=time.monotonic() + timeout)
    except BaseException:
        server.stop()
        raise
    return server


def _wait_ready(proc: subprocess.Popen, out, timeout: float) -> int:
    import select

    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.2)
        if ready:
            line = proc.stdout.readline().decode()
            if line.startswith("READY "):
                return int(line.split()[1])
        if proc.poll() is not None:
            break
    proc.kill()
    proc.wait()
    out.seek(0)
    raise RuntimeError(f"Swift did not start (exit {proc.returncode}): {out.read().decode(errors='replace')[-4000:]}")


def _wait_answers(server: SwiftS3, *, deadline: float) -> None:
    """Until the proxy answers an S3 request: a signed ListBuckets through the standard library's HTTP."""
    import http.client

    last = ""
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection(server.endpoint.removeprefix("http://"), timeout=5)
            conn.request("GET", "/healthcheck")
            conn.getresponse().read()
            conn.close()
            return
        except OSError as e:
            if e.errno not in (errno.ECONNREFUSED, errno.ECONNRESET, None):
                last = str(e)
            time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"Swift's proxy at {server.endpoint} did not answer: {last}; log: {server.log()[-4000:]}")


if __name__ == "__main__":
    serve(Path(sys.argv[1]))
