"""Training on a remote shard folder: the local run's losses, resume, and no credential written anywhere."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import tokembed
from tokembed import GPTConfig, TrainConfig, train
from tokembed.storage.options import set_remote_defaults

pytestmark = pytest.mark.slow

KEY_ID, SECRET = "test:tester", "testing"  # the server's; given only as storage options below


def _cfg(data, out: Path, **kw) -> TrainConfig:
    base = dict(max_length=16, batch_size=8, max_steps=9, eval_interval=4, eval_batches=2, checkpoint_interval=5)
    return TrainConfig(data=data, out=str(out), warmup_steps=2, **{**base, **kw})


@pytest.fixture
def folders(story, s3, tmp_path):
    src = tmp_path / "story.txt"
    src.write_text(story * 2)
    local = tmp_path / "local"
    tokembed.prepare_corpus([src], local, val_fraction=0.2, workers=1)
    url = s3.url("train")
    tokembed.prepare_corpus([src], url, val_fraction=0.2, workers=1)
    return local, url


def _everything_written(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file())


def test_training_on_a_remote_folder_matches_local_and_resumes(folders, tmp_path, monkeypatch, capfd):
    local, url = folders
    model = GPTConfig(context_length=16, dim=16, n_layers=1, n_heads=2)
    want = train(_cfg(str(local), tmp_path / "local-run"), model, progress=False)
    # Credentials only as storage options: the environment has none.
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(k)
    old = set_remote_defaults(storage_options={"key": KEY_ID, "secret": SECRET})
    try:
        part = train(_cfg(url, tmp_path / "run"), model, progress=False, stop_at=5)
        rest = train(_cfg(url, tmp_path / "run"), None, progress=False, resume=True)
    finally:
        set_remote_defaults(**{"storage_options": old.storage_options})
    assert part.step == 5
    assert [r["loss"] for r in rest.log["train"]] == [r["loss"] for r in want.log["train"]]
    assert rest.log["val"] == want.log["val"]
    written = _everything_written(tmp_path / "run")
    out, err = capfd.readouterr()
    for secret in (SECRET.encode(), KEY_ID.encode()):
        assert secret not in written and secret.decode() not in out + err
    saved = tokembed.load_checkpoint(tmp_path / "run")[1]
    assert saved["train"]["data"] == url  # the URL as given (no credentials in it)


def test_a_url_with_credentials_in_it_is_refused_as_training_data(folders, tmp_path):
    _, url = folders
    bad = url.replace("s3://", "s3://AKIAXX:topsecret@")
    with pytest.raises(ValueError) as e:
        tokembed.create_dataloader(bad, batch_size=2, max_length=8)
    assert "topsecret" not in str(e.value) and "storage-option" in str(e.value)
    assert not os.environ.get("NEVER")  # (the fixture's environment is untouched)
