"""`tokembed stats`: a summary by default, the per-file table on request, and quiet when its reader stops early."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tokembed.cli import main
from tokembed.data.plan import plan
from tokembed.shards.prepare import prepare_corpus


@pytest.fixture(scope="module")
def folder(tmp_path_factory, story, spec_texts):
    d = tmp_path_factory.mktemp("stats")
    src = d / "src"
    src.mkdir()
    (src / "story.txt").write_text(story, encoding="utf-8")
    for i, t in enumerate(spec_texts):
        (src / f"spec-{i}.md").write_text(t, encoding="utf-8")
    prepare_corpus([src], d / "out", workers=1, shard_mb=0.01, val_fraction=0.3)
    return d / "out"


def test_summary_by_default_and_the_files_with_per_file(folder, capsys):
    args = ["stats", str(folder), "--max-length", "32", "--batch-size", "4", "--world-size", "2"]
    assert main([*args, "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "story.txt" not in out and "spec-0.md" not in out and "--per-file" in out
    assert f"{len(st['inputs'])} input files" in out
    for name, s in st["splits"].items():
        windows = plan(s["tokens"], max_length=32, stride=32, batch_size=4).windows  # the loader's arithmetic
        row = next(line for line in out.splitlines() if line.startswith(name + " "))
        assert row.split() == [name, f"{s['documents']:,}", f"{s['tokens']:,}", str(s["shards"]), f"{windows:,}",
                               f"{s['rank_plan']['batches']:,}"]  # fmt: skip
    assert main([*args, "--per-file"]) == 0
    per_file = capsys.readouterr().out
    assert per_file.startswith(out.split("(per input file")[0])  # the summary, then the table
    assert "story.txt" in per_file and "5,145" in per_file  # the chapter's 5,145 tokens of the story


def test_a_reader_that_stops_early_gets_no_traceback(folder):
    """`tokembed stats DIR | head -1`: the pipe closes before stats writes; it exits 0 and says nothing."""
    cmd = [sys.executable, "-m", "tokembed", "stats", str(folder), "--per-file"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before the first line
    err = proc.stderr.read()
    assert proc.wait() == 0
    assert err == b""
    head = subprocess.run(f"{' '.join(cmd)} | head -1", shell=True, capture_output=True, text=True)
    assert head.returncode == 0 and head.stderr == "" and head.stdout.startswith(str(folder))
