"""The S3 server of the remote tests: OpenStack Swift with s3api on loopback, one per test session.

It needs a folder with user extended attributes: pytest's temporary folder (under /tmp; ext4 here and on CI),
else /dev/shm (tmpfs keeps user xattrs on Linux >= 6.6), else the session cannot start it. Under ``CI=true`` a
server that cannot start fails the tests with the reason (CI installs everything it needs); elsewhere they
are skipped with it.

Each test gets the standard AWS variables pointing at the server (`s3` fixture), a bucket of its own and a
cache folder of its own (``TOKEMBED_CACHE_DIR``), so tests never share state and never touch ``~/.cache``.
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

# This folder is a package (``remote``), so that this conftest does not shadow tests/conftest.py as the module
# ``conftest`` (``from conftest import STORY``); its helpers are imported by name from here.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from swift_s3 import SwiftS3, start_swift, xattr_problem  # noqa: E402


def _unavailable(reason: str):
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"the S3 test server (Swift) cannot start: {reason}", pytrace=False)
    pytest.skip(f"the S3 test server (Swift) cannot start: {reason}")


def _server_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("swift")
    if xattr_problem(root) is None:
        return root
    shm = Path("/dev/shm")
    if shm.is_dir():
        alt = Path(tempfile.mkdtemp(prefix="tokembed-swift-", dir=shm))
        if xattr_problem(alt) is None:
            return alt
        shutil.rmtree(alt, ignore_errors=True)
    _unavailable(f"{xattr_problem(root)}, and /dev/shm has none either")
    raise AssertionError("unreachable")


@pytest.fixture(scope="session")
def swift(tmp_path_factory: pytest.TempPathFactory):
    root = _server_root(tmp_path_factory)
    try:
        server = start_swift(root)
    except RuntimeError as e:
        _unavailable(str(e))
    yield server
    server.stop()
    if str(root).startswith("/dev/shm/"):
        shutil.rmtree(root, ignore_errors=True)


@dataclass
class S3:
    """One test's view of the server: its bucket and cache folder (the environment already points at them)."""

    server: SwiftS3
    bucket: str
    cache: Path

    def url(self, prefix: str = "data") -> str:
        return f"s3://{self.bucket}/{prefix}"


@pytest.fixture
def s3(swift: SwiftS3, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> S3:
    if swift.process.poll() is not None:
        pytest.fail(f"the S3 test server exited ({swift.process.returncode}); its log: {swift.log()[-2000:]}")
    for key, value in swift.env().items():
        monkeypatch.setenv(key, value)
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "TOKEMBED_STORAGE_BACKEND", "TOKEMBED_CACHE_BYTES"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))  # never the machine's ~/.aws
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    cache = tmp_path / "cache"
    monkeypatch.setenv("TOKEMBED_CACHE_DIR", str(cache))
    monkeypatch.setenv("TOKEMBED_RETRY_WAIT", "0.05")
    bucket = f"t{secrets.token_hex(6)}"
    from tokembed.storage.stores import open_store

    open_store(f"s3://{bucket}").make_bucket()
    return S3(swift, bucket, cache)


@pytest.fixture
def corpus(tmp_path: Path, s3: S3) -> tuple[Path, str]:
    """A local shard folder (60,000 tokens, 4 shards, 4 KiB blocks) and its copy uploaded to the bucket: ``(local,
    url)``, for tests comparing a remote folder's batches with the local one's."""
    from remote_helpers import make_folder, upload

    local = tmp_path / "local"
    make_folder(local, n_tokens=60_000, n_shards=4, block_bytes=4096)
    url = s3.url("corpus")
    upload(local, url)
    return local, url
