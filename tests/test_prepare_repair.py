"""A damaged shard folder is repaired by re-making only its damaged units, byte-identical; a folder made with other
options names the option (issue 24 item 12).

Was: ``prepare`` said "already prepared, nothing to do" even when ``check`` failed, so only ``--overwrite`` (a full
re-tokenize) repaired a folder; and "made with different config" did not say which option differed.
"""

from __future__ import annotations

import json
import random
import shutil

import pytest

from tokembed.cli import main
from tokembed.shards.check import check_shards
from tokembed.shards.prepare import prepare_corpus


def tree(root) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def made(tmp_path_factory, story, spec_texts):
    root = tmp_path_factory.mktemp("repair")
    rng = random.Random(0)
    paras = [p for t in [story, *spec_texts] for p in t.split("\n\n") if p.strip()]
    lines = [json.dumps({"text": "\n\n".join(rng.sample(paras, 2))}) + "\n" for _ in range(600)]
    (root / "docs.jsonl").write_text("".join(lines), encoding="utf-8")
    result = prepare_corpus([root / "docs.jsonl"], root / "good", val_fraction=0.1, shard_mb=0.05, workers=1)
    assert result.units >= 6
    return root


@pytest.fixture
def folder(made, tmp_path):
    shutil.copytree(made / "good", tmp_path / "s")
    return tmp_path / "s"


def rerun(made, out, *extra):
    args = ["prepare", str(made / "docs.jsonl"), "--out", str(out), "--val-fraction", "0.1", "--shard-mb", "0.05"]
    return main([*args, "--workers", "1", *extra])


def flip(path, pos: int) -> None:
    b = bytearray(path.read_bytes())
    b[pos] ^= 0x10
    path.write_bytes(bytes(b))


def test_repair_remakes_only_the_damaged_units_byte_identical(made, folder, capsys):
    flip(folder / "train" / "00002.bin", 11)  # same size: only a hash finds it
    (folder / "train" / "00004.idx").unlink()
    (folder / "train" / "00005.bin").write_bytes((folder / "train" / "00005.bin").read_bytes()[:-2])
    assert len(check_shards(folder)) == 3
    assert rerun(made, folder, "--repair") == 0
    err = capsys.readouterr().err
    assert "repaired 3 damaged units (2, 4, 5)" in err and "3 of" in err
    assert tree(folder) == tree(made / "good")  # byte-identical, the manifest too
    assert check_shards(folder) == []


def test_a_plain_rerun_remakes_missing_and_cut_files_and_points_at_repair(made, folder, capsys):
    (folder / "train" / "00001.bin").unlink()
    flip(folder / "train" / "00003.bin", 5)
    result = prepare_corpus([made / "docs.jsonl"], folder, val_fraction=0.1, shard_mb=0.05, workers=1)
    assert result.units_done == 1 and result.repaired == [1]  # sizes are cheap to check; hashes need --repair
    assert (folder / "train" / "00001.bin").read_bytes() == (made / "good" / "train" / "00001.bin").read_bytes()
    again = prepare_corpus([made / "docs.jsonl"], folder, val_fraction=0.1, shard_mb=0.05, workers=1)
    assert again.already_done and "--repair re-makes a damaged unit" in again.summary()
    result = prepare_corpus([made / "docs.jsonl"], folder, val_fraction=0.1, shard_mb=0.05, workers=1, repair=True)
    assert result.repaired == [3] and tree(folder) == tree(made / "good")


def test_repair_of_a_healthy_folder_does_nothing(made, folder):
    result = prepare_corpus([made / "docs.jsonl"], folder, val_fraction=0.1, shard_mb=0.05, workers=1, repair=True)
    assert result.already_done and result.units_done == 0 and tree(folder) == tree(made / "good")


def test_another_option_is_named_with_both_values(made, folder, capsys):
    args = ["prepare", str(made / "docs.jsonl"), "--out", str(folder), "--val-fraction", "0.05", "--shard-mb", "0.05"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "made with a different --val-fraction (0.1 in the folder, 0.05 now)" in err, err
    assert main([*args[:-2], "--shard-mb", "0.1", "--field", "body", "--val-fraction", "0.1"]) == 2
    err = capsys.readouterr().err
    assert "--field (text in the folder, body now)" in err and "--shard-mb (0.05 in the folder, 0.1 now)" in err


def test_a_result_prints_in_one_line(made, folder):
    """Was: print(prepare_corpus(...)) printed the whole manifest (about 450 KB for a large corpus)."""
    result = prepare_corpus([made / "docs.jsonl"], folder, val_fraction=0.1, shard_mb=0.05, workers=1)
    text = repr(result)
    assert len(text) < 250 and "\n" not in text and "sha256" not in text
    assert text.startswith(f"PrepareResult(out={str(folder)!r}, units={result.units}, ")
    assert result.manifest["splits"]["train"]["shards"]  # the manifest is still there, as an attribute
