"""Nothing a user has is lost, nothing is silently wrong: the attacks of issue 16 on `tokembed prepare`.

Each test reproduces one attack that broke an earlier version (named in its docstring) and checks the
behaviour the docs promise instead.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import tokembed.shards.prepare as prep
from tokembed.cli import main
from tokembed.shards.check import check_shards
from tokembed.shards.prepare import prepare_corpus
from tokembed.shards.reader import open_shards

TRIALS = int(os.environ.get("TOKEMBED_KILL_TRIALS", "3"))


def documents(root) -> list[str]:
    from tokembed.tokenizer import get_tokenizer

    enc = get_tokenizer("gpt2")
    return [enc.decode(d.tolist()) for d in open_shards(root).documents()]


# ------------------------------------------------------------------------------------------- --overwrite


def test_overwrite_never_deletes_an_input_or_a_folder_holding_one(tmp_path, monkeypatch, capsys):
    """Was: `prepare data/train --out data --overwrite` removed both folders and the input itself."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data" / "train").mkdir(parents=True)
    (tmp_path / "data" / "val").mkdir()
    (tmp_path / "data" / "train" / "a.txt").write_text("text\n")
    (tmp_path / "data" / "val" / "b.txt").write_text("text\n")
    assert main(["prepare", "data/train", "--out", "data", "--overwrite", "-q"]) == 2
    assert "input data/train/a.txt is inside the output folder data" in capsys.readouterr().err
    assert (tmp_path / "data" / "train" / "a.txt").read_text() == "text\n"
    assert (tmp_path / "data" / "val" / "b.txt").read_text() == "text\n"


def test_overwrite_refuses_a_folder_with_foreign_files_in_a_split(tmp_path):
    """Was: `prepare other.txt --out shards --overwrite` silently deleted shards/train/NOTES.txt."""
    (tmp_path / "one.txt").write_text("the first corpus\n")
    (tmp_path / "other.txt").write_text("another corpus\n")
    out = tmp_path / "shards"
    prepare_corpus([tmp_path / "one.txt"], out, workers=1)
    (out / "train" / "NOTES.txt").write_text("mine\n")
    (out / ".parts").mkdir()
    (out / ".parts" / "keep.me").write_text("mine too\n")
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    with pytest.raises(
        FileExistsError, match=r"not tokembed shards \(.parts/keep.me, train/NOTES.txt\).*never deletes them"
    ):
        prepare_corpus([tmp_path / "other.txt"], out, workers=1, overwrite=True)
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before  # nothing removed
    assert (out / "train" / "NOTES.txt").read_text() == "mine\n"
    (out / "train" / "NOTES.txt").unlink()
    (out / ".parts" / "keep.me").unlink()
    prepare_corpus([tmp_path / "other.txt"], out, workers=1, overwrite=True)
    assert documents(out) == ["another corpus\n"] and check_shards(out) == []


def test_overwrite_removes_exactly_the_files_tokembed_wrote(tmp_path):
    # A property of the rule: every file --overwrite removed had one of tokembed's names in one of its places.
    (tmp_path / "a.txt").write_text("alpha beta " * 3000)
    (tmp_path / "b.txt").write_text("gamma\n")
    out = tmp_path / "o"
    prepare_corpus([tmp_path / "a.txt"], out, workers=1, shard_mb=0.005, val_fraction=0.5)
    (out / "train" / ".00099.bin.tmp-x").write_bytes(b"left by a kill")
    old = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert len([n for n in old if n.endswith(".bin")]) > 3
    prepare_corpus([tmp_path / "b.txt"], out, workers=1, overwrite=True)
    new = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    import re

    own = re.compile(r"manifest\.json|(train|val)/(\d{5}\.(bin|idx)|\.\d{5}\.(bin|idx)\.tmp-.*)|\.tokembed\.lock")
    assert all(own.fullmatch(n) for n in old - new), old - new
    assert documents(out) == ["gamma\n"]
    assert np.array_equal(sorted(new - {".tokembed.lock"}), ["manifest.json", "train/00000.bin", "train/00000.idx"])


# ------------------------------------------------------------------------------------------- inputs


def test_a_symlink_loop_reads_each_file_once(tmp_path, monkeypatch, capsys):
    """Was: `ln -s .. L/sub/up; prepare L` wrote 82 documents (each file 41 times), exit 0."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "L" / "sub").mkdir(parents=True)
    (tmp_path / "L" / "a.txt").write_text("alpha\n")
    (tmp_path / "L" / "sub" / "b.txt").write_text("beta\n")
    (tmp_path / "L" / "sub" / "up").symlink_to("..")
    assert main(["prepare", "L", "--out", "o"]) == 0
    err = capsys.readouterr().err
    assert "skipped as repeats: L/sub/up (a link to" in err and "which was already searched" in err
    assert documents(tmp_path / "o") == ["alpha\n", "beta\n"]


def test_a_file_named_twice_or_reached_by_two_routes_is_read_once(tmp_path):
    (tmp_path / "d" / "real").mkdir(parents=True)
    (tmp_path / "d" / "real" / "x.txt").write_text("only once\n")
    (tmp_path / "d" / "again").symlink_to("real")  # a second route to the same folder
    (tmp_path / "y.txt").symlink_to(tmp_path / "d" / "real" / "x.txt")  # a second name for the same file
    res = prepare_corpus(
        [tmp_path / "d", tmp_path / "y.txt", tmp_path / "d" / "real" / "x.txt"], tmp_path / "o", workers=1
    )
    assert documents(tmp_path / "o") == ["only once\n"]
    assert [f["path"] for f in res.manifest["inputs"]] == [str(tmp_path / "d" / "real" / "x.txt")]
    assert any(s.endswith("which was already searched)") for s in res.skipped_inputs)
    assert f"{tmp_path / 'y.txt'} (the same file as {tmp_path / 'd' / 'real' / 'x.txt'})" in res.skipped_inputs


# ------------------------------------------------------------------------------------------- bad lines


@pytest.mark.parametrize(
    "line, why",
    [
        ("[" * 200_000 + "]" * 200_000, "nested too deeply to parse"),
        ('{"text": ' + "1" * 5000 + "}", r"Exceeds the limit \(4300 digits\)"),
        ('{"text": "a', "Unterminated string starting at column 10"),  # was "starting at at column"
    ],
    ids=["deep", "long-integer", "unterminated"],
)
def test_unparsable_json_lines_are_bad_lines_with_file_and_line(tmp_path, line, why):
    """Was: a RecursionError traceback (exit 1), even under --skip-bad-lines; a digit-limit error without
    file or line."""
    src = tmp_path / "in.jsonl"
    src.write_text('{"text": "fine"}\n' + line + '\n{"text": "also fine"}\n')
    with pytest.raises(ValueError, match=rf"in.jsonl, line 2: not valid JSON \({why}"):
        prepare_corpus([src], tmp_path / "o", workers=1)
    res = prepare_corpus([src], tmp_path / "o2", workers=1, skip_bad_lines=True)
    assert res.manifest["inputs"][0]["bad_lines"] == 1
    assert documents(tmp_path / "o2") == ["fine", "also fine"]


# ------------------------------------------------------------------------------------------- one writer


def test_a_second_prepare_on_a_locked_folder_names_the_holder(tmp_path):
    """Was: two `prepare` runs on the same --out at once; one died on a missing .parts/*.tmp-* rename."""
    (tmp_path / "a.txt").write_text("some text\n")
    out = tmp_path / "o"
    out.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(out / ".tokembed.lock")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(BlockingIOError, match=rf"is being written by process {holder.pid} .*wait for it to finish"):
            prepare_corpus([tmp_path / "a.txt"], out, workers=1)
    finally:
        holder.kill()
        holder.wait()
    assert sorted(p.name for p in out.iterdir()) == [".tokembed.lock"]  # the refused run wrote nothing
    prepare_corpus([tmp_path / "a.txt"], out, workers=1)  # the kernel dropped the lock with its holder
    assert check_shards(out) == []


HOLD_LOCK = "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); fcntl.flock(fd, fcntl.LOCK_EX); print('locked', flush=True); time.sleep(60)"


@pytest.mark.slow
def test_two_prepare_runs_at_once_never_break_each_other(tmp_path, story):
    (tmp_path / "in").mkdir()
    for i in range(6):
        (tmp_path / "in" / f"{i}.txt").write_text(story)
    cmd = [sys.executable, "-m", "tokembed", "prepare", str(tmp_path / "in"), "--out", str(tmp_path / "o")]
    runs = [subprocess.Popen([*cmd, "--shard-mb", "0.02", "-q"], stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(r.wait(timeout=120), r.stderr.read()) for r in runs]
    for rc, err in results:
        assert rc == 0 or (rc == 2 and "is being written by process" in err and "Traceback" not in err), (rc, err)
    if any(rc for rc, _ in results):  # the refused one, rerun, finds the work done
        subprocess.run([*cmd, "-q", "--shard-mb", "0.02"], check=True)
    assert check_shards(tmp_path / "o") == []


# ------------------------------------------------------------------------------------------- Ctrl-C


@pytest.mark.slow
def test_ctrl_c_stops_prepare_in_bounded_time(tmp_path, story, spec_texts):
    """Was: 1 in 115 SIGINTs to prepare's process group left it hanging after printing `interrupted`."""
    (tmp_path / "in").mkdir()
    rng = random.Random(int(os.environ.get("TOKEMBED_KILL_SEED", "1234")))
    paras = [p for t in [story, *spec_texts] for p in t.split("\n\n") if p.strip()]
    with open(tmp_path / "in" / "docs.jsonl", "w", encoding="utf-8") as f:
        for _ in range(3000):
            f.write(json.dumps({"text": "\n\n".join(rng.sample(paras, 3))}) + "\n")
    for trial in range(TRIALS):
        out = tmp_path / f"o{trial}"
        cmd = [
            sys.executable,
            "-m",
            "tokembed",
            "prepare",
            str(tmp_path / "in"),
            "--out",
            str(out),
            "--shard-mb",
            "0.05",
        ]
        proc = subprocess.Popen(
            [*cmd, "--workers", "2", "-q"], start_new_session=True, stderr=subprocess.PIPE, text=True
        )
        time.sleep(rng.uniform(0.5, 2.5))
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in a terminal: the whole group
        try:
            rc = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"trial {trial}: prepare still running 60 s after Ctrl-C")
        # 130: stopped cleanly; -SIGINT: interrupted while Python was still importing, before main()
        assert rc in (0, 130, -signal.SIGINT), (trial, rc, proc.stderr.read())
        subprocess.run([*cmd, "-q"], check=True)  # resumes
        assert check_shards(out) == []


# ------------------------------------------------------------------------------------------- changed inputs


def test_an_input_edited_in_place_with_the_same_size_is_prepared_again(tmp_path):
    """Was: the rerun said "already prepared with these inputs" and kept the old tokens."""
    src = tmp_path / "a.txt"
    src.write_text("hello world\n")
    out = tmp_path / "o"
    prepare_corpus([src], out, workers=1)
    assert prepare_corpus([src], out, workers=1).already_done  # unchanged: nothing to do
    src.write_text("jello world\n")  # same size
    res = prepare_corpus([src], out, workers=1)
    assert not res.already_done and res.units_done == 1
    assert documents(out) == ["jello world\n"] and check_shards(out) == []
    fresh = tmp_path / "fresh"
    prepare_corpus([src], fresh, workers=1)
    assert (out / "manifest.json").read_bytes() == (fresh / "manifest.json").read_bytes()  # as if made anew
    assert prepare_corpus([src], out, workers=1).already_done


def test_different_data_on_stdin_is_prepared_again(tmp_path):
    out = tmp_path / "o"
    cmd = [sys.executable, "-m", "tokembed", "prepare", "-", "--out", str(out), "-q", "--workers", "1"]
    subprocess.run(cmd, input=b"a b\n", check=True)
    subprocess.run(cmd, input=b"c d\n", check=True)
    assert documents(out) == ["c d\n"]


def test_a_run_killed_while_redoing_a_changed_folder_resumes(tmp_path, monkeypatch):
    src = tmp_path / "a.txt"
    src.write_text("one two three " * 2000)
    out = tmp_path / "o"
    prepare_corpus([src], out, workers=1, shard_mb=0.004)
    src.write_text("one two THREE " * 2000)  # the same size

    class Killed(Exception):
        pass

    real, calls = prep.write_unit, []

    def dying(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise Killed
        return real(*args, **kwargs)

    monkeypatch.setattr(prep, "write_unit", dying)
    with pytest.raises(Killed):
        prepare_corpus([src], out, workers=1, shard_mb=0.004)
    monkeypatch.undo()
    assert not (out / "manifest.json").exists()  # an unfinished run now, never a stale finished folder
    prepare_corpus([src], out, workers=1, shard_mb=0.004)
    fresh = tmp_path / "fresh"
    prepare_corpus([src], fresh, workers=1, shard_mb=0.004)
    assert (out / "manifest.json").read_bytes() == (fresh / "manifest.json").read_bytes()
    assert documents(out) == ["one two THREE " * 2000]


def test_an_input_time_not_recorded_is_not_compared_but_a_recorded_one_is():
    """A finished folder is tokenized again when an input's recorded modification time changed. URL inputs were
    recorded without a time (null) before review14 recorded objects' times: such a folder must not be redone on
    every rerun now that the object's time is known, while a recorded time still catches an input replaced."""
    from tokembed.shards.folder import inputs_changed
    from tokembed.shards.formats.base import InputFile

    def files(*times):
        return [InputFile(f"s3://b/{i}.jsonl", "jsonl", None, 10, t) for i, t in enumerate(times)]

    assert not inputs_changed({"input_mtimes": [None, 5]}, files(7, 5))  # the null one: not recorded
    assert inputs_changed({"input_mtimes": [None, 5]}, files(7, 6))  # the recorded one changed
    assert not inputs_changed({}, files(7, 6))  # no times at all (older still): nothing to compare
    assert inputs_changed({"input_mtimes": [3]}, files(3, 4))  # another number of inputs
    assert inputs_changed({"input_mtimes": [3]}, [InputFile("-", "text", None, None, None)])  # standard input
