"""The storage layer: URLs, sizes, options, and every fault a remote folder can have, named in its error."""

from __future__ import annotations

import socket
import sys

import numpy as np
import pytest
from remote_helpers import make_folder, upload

import tokembed
from tokembed.storage.options import parse_size, parse_storage_options, redact
from tokembed.storage.stores import RemoteError, open_store
from tokembed.storage.urls import SCHEMES, as_url, is_url, public_url, scheme_of

# -------------------------------------------------------------------------------------- no server needed


def test_urls_are_recognised_also_when_a_path_folded_them():
    assert is_url("s3://b/x") and is_url("s3:/b/x") and is_url("hf://datasets/u/r")
    assert not is_url("shards/web") and not is_url("C:/data") and not is_url("/tmp/x")
    assert as_url("s3:/bucket/x") == "s3://bucket/x"
    assert public_url("https://user:pw@host/data/x?sig=SECRET") == "https://host/data/x"
    with pytest.raises(ValueError, match=r"does not read the URL scheme 'ftp'; it reads .*s3://"):
        scheme_of("ftp://host/x")


def test_sizes_read_as_people_write_them():
    assert parse_size("512MiB") == 512 << 20
    assert parse_size("20GB") == 20 * 10**9
    assert parse_size("1.5 KiB") == 1536
    assert parse_size("4096") == 4096 and parse_size(7) == 7
    with pytest.raises(ValueError, match=r"'lots' is not a size; write e.g. 512MiB"):
        parse_size("lots")


def test_storage_options_parse_json_values_and_dotted_keys():
    got = parse_storage_options(["anon=true", "client_kwargs.region_name=eu-west-1", "retries=3", "key=AKIA"])
    assert got == {"anon": True, "client_kwargs": {"region_name": "eu-west-1"}, "retries": 3, "key": "AKIA"}
    with pytest.raises(ValueError, match=r"--storage-option takes KEY=VALUE .* got an item without '='"):
        parse_storage_options(["secretvalue"])


def test_redact_removes_option_values_and_environment_credentials(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "envsecret123")
    text = "failed with key=AKIAXYZ and secret=envsecret123 at s3://b/k"
    out = redact(text, {"key": "AKIAXYZ", "anon": True})
    assert "AKIAXYZ" not in out and "envsecret123" not in out and "s3://b/k" in out


def test_a_missing_library_names_the_extra_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "gcsfs", None)  # as if gcsfs were not installed
    with pytest.raises(ImportError, match=r"gs://bucket/x needs the gcsfs package .*pip install 'tokembed\[gcs\]'"):
        open_store("gs://bucket/x")
    with pytest.raises(ImportError, match=r"tokembed\[gcs\]"):
        tokembed.open_shards("gs://bucket/x")
    assert {s.extra for s in SCHEMES.values()} >= {"s3", "gcs", "azure", "hf", "http"}


# -------------------------------------------------------------------------------------- against the server


@pytest.fixture
def remote(tmp_path, s3):
    local = tmp_path / "local"
    make_folder(local, n_tokens=20_000, n_shards=2)
    upload(local, s3.url("f"))
    return local, s3.url("f")


@pytest.mark.slow
def test_remote_reads_equal_local_reads_and_check_is_clean(remote):
    local, url = remote
    a, b = tokembed.open_shards(local), tokembed.open_shards(url)
    assert np.array_equal(a.read(0, a.n_tokens), b.read(0, b.n_tokens))
    assert np.array_equal(a.doc_starts(), b.doc_starts())
    starts = np.arange(0, a.n_tokens - 300, 997)
    assert np.array_equal(b.rows(starts, 300), np.stack([a.read(s, s + 300) for s in starts]))
    assert tokembed.check_shards(url) == []


@pytest.mark.slow
def test_missing_bucket_and_missing_folder_name_the_url(s3):
    with pytest.raises(
        FileNotFoundError, match=r"s3://no-such-bucket-x/shards/manifest.json not found \(.*bucket does not exist"
    ):
        tokembed.open_shards("s3://no-such-bucket-x/shards")
    with pytest.raises(
        FileNotFoundError, match=rf"{s3.url('empty')}/manifest.json not found \(.*\): .* not a finished shard folder"
    ):
        tokembed.open_shards(s3.url("empty"))
    with pytest.raises(FileNotFoundError, match=r"s3://.*/nothing/here \(bytes 0-9\) was not found"):
        open_store(s3.url("nothing")).read("here", 0, 10)


@pytest.mark.slow
def test_wrong_credentials_are_refused_without_showing_them(remote, monkeypatch):
    _, url = remote
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-password-9f3a")
    with pytest.raises(PermissionError) as e:
        tokembed.open_shards(url)
    assert url in str(e.value) and "AWS_ACCESS_KEY_ID" in str(e.value)
    assert "not-the-password-9f3a" not in str(e.value)
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(PermissionError) as e:
        tokembed.open_shards(url, storage_options={"key": "test:tester", "secret": "opt-secret-77x1"})
    assert "opt-secret-77x1" not in str(e.value)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_a_network_error_is_retried_then_names_url_and_byte_range(s3, monkeypatch):
    monkeypatch.setenv("TOKEMBED_RETRIES", "2")
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{_closed_port()}")  # nothing listens there
    store = open_store(s3.url("f"), {"config_kwargs": {"retries": {"max_attempts": 1}}})
    with pytest.raises(RemoteError, match=rf"reading {s3.url('f')}/train/00000.bin \(bytes 4096-8191\) failed 2 times"):
        store.read("train/00000.bin", 4096, 8192)


@pytest.mark.slow
def test_a_changed_object_is_refetched_then_named_never_read(remote, s3):
    local, url = remote
    data = bytearray((local / "train/00001.bin").read_bytes())
    data[5000] ^= 0xFF  # one flipped byte in block 1 (bytes 4096-8191)
    from remote_helpers import put_bytes

    put_bytes(f"{url}/train/00001.bin", bytes(data))
    ss = tokembed.open_shards(url, cache_bytes="1MiB")
    first = int(ss.cumulative[1])
    assert np.array_equal(
        ss.read(first, first + 2000), tokembed.open_shards(local).read(first, first + 2000)
    )  # block 0 is fine
    with pytest.raises(
        tokembed.storage.CorruptBlockError,
        match=rf"{url}/train/00001.bin \(bytes 4096-8191\) does not match the manifest .* fetched twice",
    ):
        ss.read(first + 2048, first + 4096)
    assert ss.blocks().cache.stats.refetched == 1
    assert not ss.blocks().path("train/00001.bin", 1).exists()  # nothing unverified was kept
    loader = tokembed.create_dataloader(url, batch_size=8, max_length=64, shuffle=False, cache_bytes="1MiB")
    with pytest.raises(tokembed.storage.CorruptBlockError, match=r"train/00001.bin"):
        list(loader)
    problems = tokembed.check_shards(url)
    assert problems == [
        "train/00001.bin: sha256 mismatch (the token file was modified or damaged; block 1, bytes 4096-8191, differs)"
    ]
