"""The CLI with remote folders: check, stats, train, eval and export take URLs; --cache-dir, --cache-bytes and
--storage-option are one vocabulary; credentials given as options are never written or shown."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from remote_helpers import make_folder, put_bytes, upload

import tokembed
from tokembed.cli import main
from tokembed.storage.options import remote_options, set_remote_defaults

pytestmark = pytest.mark.slow

KEY_ID, SECRET = "test:tester", "testing"  # the server's (tests/remote/swift_s3.py); given as options below


@pytest.fixture(autouse=True)
def _fresh_defaults():
    """`main` makes the flags this process's defaults (a command runs once per process); tests run many."""
    old = set_remote_defaults()
    yield
    set_remote_defaults(storage_options=old.storage_options, cache_dir=old.cache_dir, cache_bytes=old.cache_bytes)


@pytest.fixture
def folder(tmp_path, s3):
    local = tmp_path / "local"
    make_folder(local, n_tokens=30_000, n_shards=3, block_bytes=4096)
    url = s3.url("cli")
    upload(local, url)
    return local, url


@pytest.fixture
def prepared(story, s3, tmp_path):
    """A folder with a val split, prepared by tokembed into the bucket (and locally, for comparison)."""
    src = tmp_path / "story"  # a document per paragraph: both splits have some
    src.mkdir()
    for i, part in enumerate(p for p in (story * 2).split("\n\n") if p.strip()):
        (src / f"{i:03d}.txt").write_text(part)
    local = tmp_path / "prepared"
    tokembed.prepare_corpus([src], local, val_fraction=0.2, workers=1)
    url = s3.url("prepared")
    tokembed.prepare_corpus([src], url, val_fraction=0.2, workers=1)
    return local, url


def test_check_and_stats_take_a_url_and_find_a_flipped_byte(folder, capsys):
    local, url = folder
    assert main(["check", url]) == 0
    assert capsys.readouterr().out.startswith(f"{url}: OK (train: 3 shards")
    assert main(["stats", url, "--json", "--max-length", "64"]) == 0
    remote = json.loads(capsys.readouterr().out)
    assert main(["stats", str(local), "--json", "--max-length", "64"]) == 0
    want = json.loads(capsys.readouterr().out)
    assert remote["root"] == url and {**remote, "root": None} == {**want, "root": None}

    first = json.loads((local / "manifest.json").read_text())["splits"]["train"]["shards"][1]["tokens"]
    data = bytearray((local / first).read_bytes())
    data[5000] ^= 1  # in the second 4 KiB block
    put_bytes(f"{url}/{first}", bytes(data))
    assert main(["check", url]) == 1
    out, err = capsys.readouterr()
    assert f"DAMAGED: {first}" in out and "block 1, bytes 4096-8191" in out and f"{url}: 1 problem(s)" in err


def test_the_storage_flags_set_the_cache_and_the_options(folder, tmp_path, capsys):
    _, url = folder
    cache = tmp_path / "flag-cache"
    flags = ["--cache-dir", str(cache), "--cache-bytes", "1MiB", "--storage-option", "anon=false"]
    assert main(["stats", url, *flags]) == 0
    got = remote_options()
    assert (got.cache_dir, got.cache_bytes, dict(got.storage_options)) == (str(cache), 1 << 20, {"anon": False})
    with pytest.raises(SystemExit):
        main(["check", url, "--cache-bytes", "lots"])
    assert "--cache-bytes: 'lots' is not a size; write e.g. 512MiB" in capsys.readouterr().err
    assert main(["check", url, "--storage-option", "novalue"]) == 2
    assert "--storage-option takes KEY=VALUE" in capsys.readouterr().err


def test_help_says_the_cache_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["check", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "default: $TOKEMBED_CACHE_DIR, else ~/.cache/tokembed" in text
    assert "default: $TOKEMBED_CACHE_BYTES, else 16GiB" in text and "--storage-option KEY=VALUE" in text


def _written(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file())


def test_credentials_given_as_options_are_never_written_or_shown(prepared, tmp_path, monkeypatch, capfd):
    """Train, eval, export and check from the bucket with the credentials as --storage-option only: nothing they
    write (checkpoint, logs, export, the cache's records) and nothing they print holds them."""
    local, url = prepared
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(k)
    creds = ["--storage-option", f"key={KEY_ID}", "--storage-option", f"secret={SECRET}"]
    cache = tmp_path / "cache-cli"
    run = tmp_path / "run"
    common = ["--max-length", "16", "--batch-size", "4", "--dim", "16", "--layers", "1", "--heads", "2"]
    assert (
        main(["train", url, "--out", str(run), "--steps", "3", *common, "-q", *creds, "--cache-dir", str(cache)]) == 0
    )
    assert main(["eval", str(run), "--data", url, "-q", *creds, "--cache-dir", str(cache)]) == 0
    exported = tmp_path / "nanogpt"
    assert main(["export", url, "--format", "nanogpt", "--out", str(exported), *creds, "--cache-dir", str(cache)]) == 0
    assert main(["check", url, *creds]) == 0
    out, err = capfd.readouterr()
    assert url in out
    # A wrong secret: refused, and the message names neither it nor the key's secret.
    wrong = ["--storage-option", f"key={KEY_ID}", "--storage-option", "secret=WRONG-s3cr3t-value"]
    assert main(["check", url, *wrong]) == 2  # not a damaged folder: refused credentials
    bad_out, bad_err = capfd.readouterr()
    assert "credentials" in bad_out + bad_err and "WRONG-s3cr3t-value" not in bad_out + bad_err
    for where, text in (("stdout", out + bad_out), ("stderr", err + bad_err)):
        assert SECRET not in text and KEY_ID not in text, where
    for folder in (run, exported, cache):
        written = _written(folder)
        assert SECRET.encode() not in written and KEY_ID.encode() not in written, folder
    assert tokembed.load_checkpoint(run)[1]["train"]["data"] == url  # the URL as given
    # What was exported is the local folder's bytes.
    assert main(["export", str(local), "--format", "nanogpt", "--out", str(tmp_path / "from-local")]) == 0
    for name in ("train.bin", "val.bin"):
        assert np.array_equal(
            np.fromfile(exported / name, dtype=np.uint16), np.fromfile(tmp_path / "from-local" / name, dtype=np.uint16)
        )
