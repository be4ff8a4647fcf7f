"""A full disk is one line naming the file and what to do, and nothing is lost (issue 24 item 22, its full-disk part).

Was: ``train`` on a full disk ended in a torch RuntimeError traceback ("PytorchStreamWriter failed writing file"),
``prepare`` and ``export`` in a bare ``[Errno 28] No space left on device`` naming no path.

Each test runs the real command on a real small file system: a tmpfs of a few MB, mounted in a private mount
namespace (``unshare --user --map-root-user --mount``: no root needed, nothing of the machine's is touched, gone
when the command ends). What the test checks afterwards is checked inside that namespace too.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from conftest import STORY

pytestmark = pytest.mark.slow


def _can_mount() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"], capture_output=True)
    return probe.returncode == 0


needs_tmpfs = pytest.mark.skipif(not _can_mount(), reason="no private mount namespace (unshare -rm) here")


def on_small_disk(disk, size: str, script: str) -> subprocess.CompletedProcess:
    """Run the shell ``script`` with a tmpfs of ``size`` at ``disk``; ``$TOKEMBED`` runs this tokembed."""
    disk.mkdir(exist_ok=True)
    wrapped = f'mount -t tmpfs -o size={size} tmpfs "{disk}" || exit 99\nTOKEMBED="{sys.executable} -m tokembed"\n'
    proc = subprocess.run(["unshare", "-rm", "sh", "-ec", wrapped + script], capture_output=True, text=True)
    assert proc.returncode != 99, proc.stderr
    return proc


@pytest.fixture(scope="module")
def big_text(tmp_path_factory, story, spec_texts):
    path = tmp_path_factory.mktemp("big") / "big.jsonl"
    paras = [p for t in [story, *spec_texts] for p in t.split("\n\n") if p.strip()]
    path.write_text("".join(json.dumps({"text": p}) + "\n" for p in paras * 6), encoding="utf-8")
    return path


@needs_tmpfs
def test_prepare_on_a_full_disk_names_the_file(big_text, tmp_path):
    disk = tmp_path / "disk"
    out = disk / "shards"
    proc = on_small_disk(disk, "256k", f"$TOKEMBED prepare {big_text} --out {out} --shard-mb 0.05 --workers 1 -q")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "tokembed prepare: error: [Errno 28] no space left on device: could not write " in proc.stderr
    assert f"{out}/" in proc.stderr and "free some space (or choose another output) and run the command again" in (
        proc.stderr
    )


@needs_tmpfs
def test_export_on_a_full_disk_names_the_export_and_leaves_nothing(big_text, tmp_path):
    shards = tmp_path / "shards"
    subprocess.run([sys.executable, "-m", "tokembed", "prepare", str(big_text), "--out", str(shards), "-q"], check=True)
    disk = tmp_path / "disk"
    proc = on_small_disk(
        disk,
        "128k",
        f'$TOKEMBED export {shards} --format megatron --out {disk}/corpus && exit 0 || rc=$?\nls -A {disk} >&2\nexit "$rc"',
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert "Traceback" not in proc.stderr
    assert "no space left on device: could not write corpus.bin, corpus.tokembed.json, corpus.idx in" in lines[0]
    assert lines[1:] == []  # the disk is left empty: no staging folder, no half .bin


@needs_tmpfs
def test_train_on_a_full_disk_keeps_the_previous_checkpoint(tmp_path):
    """Room for one checkpoint (about 10 MB) but not for two: the second save fails, the first one stays whole."""
    disk = tmp_path / "disk"
    run = disk / "run"
    small = "--max-length 16 --batch-size 4 --dim 16 --layers 1 --heads 2 --quiet --keep 1"
    proc = on_small_disk(
        disk,
        "16m",
        f"$TOKEMBED train {STORY} --out {run} --steps 2 --checkpoint-interval 1 {small} && exit 0 || rc=$?\n"
        f'echo "exit $rc" >&2\n$TOKEMBED eval {run} --lengths 16 --max-windows 2 --json\n'
        f"ls -A {disk} >&2",
    )
    err = proc.stderr.strip().splitlines()
    assert "exit 2" in err, proc.stderr
    assert "Traceback" not in proc.stderr and "RuntimeError" not in proc.stderr
    message = err[err.index("exit 2") - 1]
    assert message.startswith("tokembed train: error: [Errno 28] ")
    assert f"could not write {run}" in message and f"the checkpoint {run} is the previous one, intact" in message
    assert json.loads(proc.stdout)[0]["loss"] is not None  # the step-1 checkpoint loads and verifies
    assert err[-1] == "run"  # no temporary folder left on the disk
