"""A URL-looking path never silently becomes a local folder (issue 24 item 6).

Was: ``prepare --out s3://bucket/x`` exited 0 and wrote a local folder ``./s3:/bucket/x`` (argparse's Path collapses
``//``), and ``stats`` then suggested ``--out s3:/bucket/shards``. Until remote storage supports a scheme for a
command, every command refuses a URL naming its scheme; tokembed._paths is where that support plugs in. The commands
that read or write shard folders in object storage (docs/remote.md) are `REMOTE`.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import STORY
from tokembed import GPTConfig, TrainConfig, train
from tokembed._paths import as_url, is_url, local_path, url_scheme
from tokembed.cli import main

URLS = ["s3://bucket/x", "gs://bucket/x", "hf://datasets/org/x", "https://example.com/x", "file:///tmp/x"]


@pytest.mark.parametrize(
    "text, scheme",
    [
        ("s3://bucket/x", "s3"),
        ("S3://Bucket/x", "s3"),
        ("gs://b", "gs"),
        ("hf://datasets/a/b", "hf"),
        ("https://h/x?y=1", "https"),
        ("file:///tmp/x", "file"),
        ("az://c/x", "az"),
        ("git+ssh://h/x", "git+ssh"),
        (Path("s3://bucket/x"), "s3"),  # Path collapses // to /
        ("shards/web", None),
        ("./s3:/bucket/x", None),  # the way to name such a local folder on purpose
        ("C:/data", None),  # a drive letter, not a scheme
        ("a:b", None),
        ("/abs/s3://x", None),
        ("", None),
    ],
)
def test_url_scheme(text, scheme):
    assert url_scheme(text) == scheme
    assert is_url(text) == (scheme is not None)


def test_as_url_restores_what_a_path_collapsed():
    assert as_url(Path("s3://bucket/x")) == "s3://bucket/x"
    assert as_url(Path("file:///tmp/x")) == "file:///tmp/x"
    assert as_url("shards/web") == "shards/web"
    with pytest.raises(
        ValueError, match=r"--out s3://bucket/x is a URL, and remote storage \(s3://\) is not supported"
    ):
        local_path(Path("s3://bucket/x"), what="--out")
    assert local_path("./s3:/bucket/x", what="--out") == Path("s3:/bucket/x")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    root = tmp_path_factory.mktemp("made")
    assert main(["prepare", str(STORY), "--out", str(root / "shards"), "-q", "--workers", "1"]) == 0
    config = TrainConfig(data=str(STORY), out=str(root / "run"), max_length=16, batch_size=4, max_steps=1)
    train(config, GPTConfig(context_length=16, dim=16, n_layers=1, n_heads=2), progress=False)
    return root


COMMANDS = {
    "prepare --out": lambda u, m: ["prepare", str(STORY), "--out", u, "-q"],
    "prepare input": lambda u, m: ["prepare", u, "--out", str(m / "p"), "-q"],
    "train --out": lambda u, m: ["train", str(STORY), "--out", u, "--steps", "1", "--dim", "16", "--layers", "1"],
    "train data": lambda u, m: ["train", u, "--out", str(m / "t")],
    "train --source": lambda u, m: ["train", "--source", f"{u}:1", "--out", str(m / "t")],
    "eval": lambda u, m: ["eval", u],
    "eval --data": lambda u, m: ["eval", str(m / "run"), "--data", u],
    "inspect": lambda u, m: ["inspect", u, "info"],
    "report": lambda u, m: ["report", u, "-o", str(m / "r.html")],
    "report -o": lambda u, m: ["report", str(m / "run"), "-o", u],
    "export table": lambda u, m: ["export", str(m / "run"), u, "--format", "npy"],
    "export megatron": lambda u, m: ["export", str(m / "shards"), "--format", "megatron", u, "--split", "train"],
    "export source": lambda u, m: ["export", u, "--format", "nanogpt", str(m / "n")],
    "check": lambda u, m: ["check", u],
    "stats": lambda u, m: ["stats", u],
    "stats --source": lambda u, m: ["stats", "--source", f"{u}:1"],
    "merge": lambda u, m: ["merge", u],
    "experiment": lambda u, m: ["experiment", "positions", str(STORY), "--out", u, "--quick"],
}


# What reads or writes shard folders in object storage (issue 21, docs/remote.md): tested against a server in
# tests/remote/; here only that, without credentials, they stop before any request and write nothing locally.
REMOTE = ("prepare --out", "prepare input", "train data", "train --source", "eval --data", "export source", "check")
REMOTE += ("stats", "stats --source")


@pytest.mark.parametrize("command", REMOTE)
def test_commands_that_read_remote_folders_stop_without_credentials_and_write_nothing_here(
    command, made, tmp_path_factory, monkeypatch, capsys
):
    here, cache = tmp_path_factory.mktemp("cwd"), tmp_path_factory.mktemp("cache")
    monkeypatch.chdir(here)
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # botocore asks no instance metadata service
    monkeypatch.setenv("AWS_CONFIG_FILE", str(here / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(here / "none"))
    monkeypatch.setenv("TOKEMBED_CACHE_DIR", str(cache))
    before = sorted(p.name for p in made.iterdir())
    assert main(COMMANDS[command]("s3://bucket/x", made)) == 2
    err = capsys.readouterr().err
    assert "s3://bucket/x" in err and "check the credentials: AWS_ACCESS_KEY_ID" in err, err
    assert os.listdir(here) == []  # no ./s3:/bucket/x
    assert sorted(p.name for p in made.iterdir()) == before


@pytest.mark.parametrize("url", URLS)
@pytest.mark.parametrize("command", [c for c in COMMANDS if c not in REMOTE])
def test_every_command_refuses_a_url_and_writes_nothing(command, url, made, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    before = sorted(p.name for p in made.iterdir())
    assert main(COMMANDS[command](url, made)) == 2
    err = capsys.readouterr().err
    scheme = url.split(":")[0]
    assert f"{url} is a URL, and " in err, err
    assert f"({scheme}://) is not supported" in err or f"no reader for {scheme}:// URLs" in err, err  # (inputs)
    assert os.listdir(tmp_path) == []  # no ./s3:/bucket/x
    assert sorted(p.name for p in made.iterdir()) == before
