"""The resume command `tokembed train` prints when stopped never shows a ``--storage-option`` value (review2).

A training job's stderr is its log; the credentials given as ``--storage-option secret=...`` must not be in it.
"""

from __future__ import annotations

import argparse

from tokembed.cli.train import _resume_command

SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCY"


def test_the_resume_command_keeps_the_keys_and_hides_the_storage_option_values():
    argv = ["train", "s3://bkt/shards", "--storage-option", f"secret={SECRET}==", "--storage-option=key=AKIAEXAMPLE42"]
    args = argparse.Namespace(argv=argv, storage_options=[f"secret={SECRET}", "key=AKIAEXAMPLE42"])
    shown = _resume_command(args)
    assert SECRET not in shown and "AKIAEXAMPLE42" not in shown
    assert "--storage-option 'secret=***'" in shown and "'--storage-option=key=***'" in shown  # what to give again
    assert "give the --storage-option values again" in shown
    assert "s3://bkt/shards" in shown and "--resume" in shown


def test_the_resume_command_hides_credentials_of_the_environment(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    args = argparse.Namespace(argv=["train", "s3://bkt/shards", "--note", SECRET], storage_options=None)
    assert SECRET not in _resume_command(args)
