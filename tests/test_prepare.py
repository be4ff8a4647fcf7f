"""`tokembed prepare`: round trips through disk, determinism across workers/ranks, resume, bad input, the CLI."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tokembed.shards.folder as folder
import tokembed.shards.prepare as prep
import tokembed.shards.units as units
from tokembed._atomic import atomic_write
from tokembed.cli import main
from tokembed.shards.check import check_shards
from tokembed.shards.config import PrepareConfig
from tokembed.shards.prepare import merge_manifests, prepare_corpus
from tokembed.shards.reader import open_shards
from tokembed.tokenizer import get_tokenizer

ENC = get_tokenizer("gpt2")
EOT = ENC.eot_token
TOKEMBED = [sys.executable, "-m", "tokembed"]

MIXED = [
    "Emoji: 🤖🧠✨ 👩🏽‍💻 and flags 🇫🇷🇯🇵",
    "Mixed scripts: Ελληνικά, русский, 日本語の文章, 한국어, العربية, עברית, हिन्दी",
    "A literal <|endoftext|> inside a document stays text, and so does <|fim_prefix|>.",
    "  leading and trailing whitespace\n\n\t ",
    "Zero width\u200bjoiner\u200d and combining e\u0301 and NUL-free control \x07 chars",
]


def folder_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def decoded_documents(root: Path, split: str = "train") -> list[str]:
    ss = open_shards(root, split=split)
    return [ENC.decode(d.tolist()) for d in ss.documents()]


def write_jsonl(path: Path, docs, field="text") -> Path:
    path.write_text("".join(json.dumps({field: d, "id": i}) + "\n" for i, d in enumerate(docs)), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, story, spec_texts):
    """The story and five translations as text files, plus a JSON Lines file of tricky documents."""
    d = tmp_path_factory.mktemp("corpus")
    (d / "a-story.txt").write_text(story, encoding="utf-8")
    for i, t in enumerate(spec_texts):
        (d / f"spec-{i}.md").write_text(t, encoding="utf-8")
    write_jsonl(d / "z-mixed.jsonl", MIXED)
    # Reference order: the inputs sorted by path, documents in file order.
    docs = [story, *spec_texts, *MIXED]
    return d, docs


# ------------------------------------------------------------------------------------------- round trips


def test_round_trip_gives_back_every_document_and_the_reference_tokens(corpus, tmp_path):
    src, docs = corpus
    res = prepare_corpus([src], tmp_path / "out", workers=1, shard_mb=0.05)
    assert res.units > 1  # several shards, documents whole in each
    assert decoded_documents(tmp_path / "out") == docs
    ss = open_shards(tmp_path / "out", verify=True)
    expected = [t for d in docs for t in ENC.encode_ordinary(d) + [EOT]]  # the tokenizer applied to each document
    assert ss.read(0, ss.n_tokens).tolist() == expected
    assert np.array_equal(ss.doc_starts(), np.cumsum([0] + [len(ENC.encode_ordinary(d)) + 1 for d in docs])[:-1])
    m = res.manifest
    assert m["dtype"] == "uint16" and m["tokenizer"]["n_vocab"] == 50257 and m["tokenizer"]["eot_token"] == 50256
    assert m["splits"]["train"]["documents"] == len(docs) and m["splits"]["val"]["documents"] == 0
    assert [Path(f["path"]).name for f in m["inputs"]] == [
        "a-story.txt",
        *[f"spec-{i}.md" for i in range(5)],
        "z-mixed.jsonl",
    ]
    assert m["inputs"][0]["tokens"] == 5145 and m["inputs"][0]["chars"] == 20479  # the chapter's numbers for the story
    assert check_shards(tmp_path / "out") == []


def test_gzip_inputs_give_the_same_shards(corpus, tmp_path):
    src, docs = corpus
    gz = tmp_path / "gz"
    gz.mkdir()
    for p in src.iterdir():
        (gz / (p.name + ".gz")).write_bytes(gzip.compress(p.read_bytes()))
    prepare_corpus([src], tmp_path / "plain", workers=1)
    prepare_corpus([gz], tmp_path / "gzip", workers=1)
    a, b = open_shards(tmp_path / "plain"), open_shards(tmp_path / "gzip")
    assert a.read(0, a.n_tokens).tolist() == b.read(0, b.n_tokens).tolist()
    assert decoded_documents(tmp_path / "gzip") == docs


jsonl_docs = st.lists(st.text(min_size=0, max_size=60), min_size=1, max_size=12)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(docs=jsonl_docs, shard_bytes=st.integers(1, 400), val=st.sampled_from([0.0, 0.5]))
def test_round_trip_property(tmp_path_factory, docs, shard_bytes, val):
    d = tmp_path_factory.mktemp("prop")
    write_jsonl(d / "in.jsonl", docs)
    kept = [t for t in docs if t.strip()]
    if not kept:  # nothing to tokenize is an error naming the input, not a folder of 0 tokens
        with pytest.raises(ValueError, match=rf"no documents to tokenize \(.*in.jsonl: {len(docs)} empty document"):
            prepare_corpus([d / "in.jsonl"], d / "out", workers=1, shard_mb=shard_bytes / 1e6, val_fraction=val)
        return
    res = prepare_corpus([d / "in.jsonl"], d / "out", workers=1, shard_mb=shard_bytes / 1e6, val_fraction=val)
    got_train, got_val = decoded_documents(d / "out", "train"), decoded_documents(d / "out", "val")
    # Every non-empty document comes back exactly once, in order within its split.
    assert sorted(got_train + got_val) == sorted(kept)
    assert got_train == [t for t in kept if t in set(got_train)]
    assert res.manifest["inputs"][0]["empty"] == len(docs) - len(kept)
    assert check_shards(d / "out") == []


def test_val_split_is_deterministic_by_document(tmp_path):
    docs = [f"document number {i}: " + "word " * (i % 7) for i in range(400)] + ["duplicate text"] * 5
    write_jsonl(tmp_path / "in.jsonl", docs)
    prepare_corpus([tmp_path / "in.jsonl"], tmp_path / "a", workers=1, val_fraction=0.25, shard_mb=0.001)
    val = decoded_documents(tmp_path / "a", "val")
    train = decoded_documents(tmp_path / "a", "train")
    assert 50 < len(val) < 150  # 25% of ~400, by a hash
    assert len(val) + len(train) == len(docs)
    assert ("duplicate text" in val) != ("duplicate text" in train)  # identical documents, same split
    # Same split whatever the shard size (the hash is of the text, not of a position).
    prepare_corpus([tmp_path / "in.jsonl"], tmp_path / "b", workers=1, val_fraction=0.25, shard_mb=1)
    assert decoded_documents(tmp_path / "b", "val") == val


def test_stdin_input(tmp_path):
    docs = ["first document", "second one ✨"]
    data = "".join(json.dumps({"text": d}) + "\n" for d in docs).encode()
    r = subprocess.run(
        [*TOKEMBED, "prepare", "-", "--format", "jsonl", "--out", str(tmp_path / "o"), "--workers", "1", "-q"],
        input=data,
        capture_output=True,
    )
    assert r.returncode == 0, r.stderr.decode()
    assert decoded_documents(tmp_path / "o") == docs


# ------------------------------------------------------------------------------------------- determinism


@pytest.mark.slow
def test_same_bytes_with_one_and_two_workers(corpus, tmp_path):
    src, _ = corpus
    prepare_corpus([src], tmp_path / "w1", workers=1, shard_mb=0.01, val_fraction=0.3)
    res = prepare_corpus([src], tmp_path / "w2", workers=2, shard_mb=0.01, val_fraction=0.3)
    assert res.units >= 4
    assert folder_bytes(tmp_path / "w1") == folder_bytes(tmp_path / "w2")


def test_ranks_and_merge_give_the_same_bytes(corpus, tmp_path):
    src, _ = corpus
    prepare_corpus([src], tmp_path / "one", workers=1, shard_mb=0.01, val_fraction=0.3)
    multi = tmp_path / "multi"
    r1 = prepare_corpus([src], multi, workers=1, shard_mb=0.01, val_fraction=0.3, rank=1, world_size=3)
    assert r1.manifest is None and (multi / "manifest.rank-00001-of-00003.json").is_file()
    with pytest.raises(ValueError, match=r"ranks \[0, 2\] of 3 have not finished"):
        merge_manifests(multi)
    with pytest.raises(FileNotFoundError, match="is not a finished shard folder; it holds per-rank manifests"):
        open_shards(multi)
    for rank in (0, 2):
        prepare_corpus([src], multi, workers=1, shard_mb=0.01, val_fraction=0.3, rank=rank, world_size=3)
    assert main(["merge", str(multi)]) == 0
    assert folder_bytes(tmp_path / "one") == folder_bytes(multi)


def test_merge_errors(tmp_path):
    tmp_path.joinpath("x").mkdir()
    with pytest.raises(FileNotFoundError, match="holds no rank manifests"):
        merge_manifests(tmp_path / "x")


# ------------------------------------------------------------------------------------------- resume


class Crash(Exception):
    pass


def test_resume_after_a_crash_is_byte_identical(corpus, tmp_path, monkeypatch):
    src, _ = corpus
    prepare_corpus([src], tmp_path / "ref", workers=1, shard_mb=0.01, val_fraction=0.3)
    out = tmp_path / "out"
    real = prep.write_unit
    calls = {"n": 0}

    def crashing(out_, result, dtype):
        calls["n"] += 1
        if calls["n"] == 3:
            # Die half-way through a unit: one shard written, its record not.
            split, r = next(iter(result["splits"].items()))
            atomic_write(out_ / f"{split}/{result['unit']:05d}.bin", r["tokens"][: len(r["tokens"]) // 2])
            (out_ / split / f".{result['unit']:05d}.idx.tmp-1-dead").write_bytes(b"half")
            raise Crash
        return real(out_, result, dtype)

    monkeypatch.setattr(prep, "write_unit", crashing)
    with pytest.raises(Crash):
        prepare_corpus([src], out, workers=1, shard_mb=0.01, val_fraction=0.3)
    assert not (out / "manifest.json").exists()
    with pytest.raises(FileNotFoundError, match="looks like an unfinished `tokembed prepare`: rerun the same command"):
        open_shards(out)
    monkeypatch.setattr(prep, "write_unit", real)
    res = prepare_corpus([src], out, workers=1, shard_mb=0.01, val_fraction=0.3)
    assert res.units_skipped == 2 and res.units_done == res.units - 2
    assert folder_bytes(out) == folder_bytes(tmp_path / "ref")
    again = prepare_corpus([src], out, workers=1, shard_mb=0.01, val_fraction=0.3)
    assert again.already_done and "nothing to do" in again.summary()
    assert folder_bytes(out) == folder_bytes(tmp_path / "ref")


def test_resume_redoes_a_unit_whose_shard_was_damaged(corpus, tmp_path, monkeypatch):
    src, _ = corpus
    prepare_corpus([src], tmp_path / "ref", workers=1, shard_mb=0.01)
    out = tmp_path / "out"
    real = prep.write_unit

    def crash_on_unit_3(out_, result, dtype):
        if result["unit"] == 3:
            raise Crash
        return real(out_, result, dtype)

    monkeypatch.setattr(prep, "write_unit", crash_on_unit_3)
    with pytest.raises(Crash):
        prepare_corpus([src], out, workers=1, shard_mb=0.01)
    p = out / "train" / "00001.bin"
    b = bytearray(p.read_bytes())
    b[0] ^= 0xFF
    p.write_bytes(bytes(b))  # a finished shard damaged between the runs
    monkeypatch.setattr(prep, "write_unit", real)
    res = prepare_corpus([src], out, workers=1, shard_mb=0.01)
    assert res.units_skipped == 2  # units 0 and 2; unit 1 is tokenized again
    assert folder_bytes(out) == folder_bytes(tmp_path / "ref")


def test_resume_never_reuses_a_unit_whose_input_changed(tmp_path, monkeypatch):
    docs = [f"doc {i} " * 40 for i in range(60)]
    write_jsonl(tmp_path / "in.jsonl", docs)
    real = prep.write_unit

    def crash_on_unit_2(out_, result, dtype):
        if result["unit"] == 2:
            raise Crash
        return real(out_, result, dtype)

    monkeypatch.setattr(prep, "write_unit", crash_on_unit_2)
    with pytest.raises(Crash):
        prepare_corpus([tmp_path / "in.jsonl"], tmp_path / "out", workers=1, shard_mb=0.002)
    monkeypatch.undo()
    changed = [d.upper() if i == 0 else d for i, d in enumerate(docs)]  # same size: the folder's identity still matches
    write_jsonl(tmp_path / "in.jsonl", changed)
    res = prepare_corpus([tmp_path / "in.jsonl"], tmp_path / "out", workers=1, shard_mb=0.002)
    assert res.units_skipped == 1  # unit 1 is reused; unit 0's input bytes changed, so it is tokenized again
    assert decoded_documents(tmp_path / "out") == changed


@pytest.mark.parametrize("change", ["the first document moves to another split", "the input now makes fewer units"])
def test_a_resume_on_changed_input_leaves_no_stale_shard(tmp_path, monkeypatch, change):
    # The folder's identity checks input sizes only, so a same-size change is resumed; the units whose
    # input changed are redone, and nothing of the interrupted run may survive in the finished folder.
    candidates = [f"document {i:04d} " + "y" * 200 for i in range(100)]  # each fills a unit by itself
    val_doc = next(d for d in candidates if units._in_val(d, 0.5))
    train_doc = next(d for d in candidates if not units._in_val(d, 0.5))
    first = [val_doc] + [f"line {i:04d} " * 3 for i in range(40)]
    if change == "the first document moves to another split":
        second = [train_doc] + first[1:]
    else:  # as many bytes in two lines: fewer units
        size = lambda docs: write_jsonl(tmp_path / "probe.jsonl", docs).stat().st_size  # noqa: E731
        second = [val_doc, "x" * (size(first) - size([val_doc, ""]))]
    src = tmp_path / "in.jsonl"
    write_jsonl(src, first)
    real, written = prep.write_unit, []

    def crash_after_four_units(out_, result, dtype):
        if len(written) == 4:
            raise Crash
        written.append(result["unit"])
        return real(out_, result, dtype)

    monkeypatch.setattr(prep, "write_unit", crash_after_four_units)
    with pytest.raises(Crash):
        prepare_corpus([src], tmp_path / "out", workers=1, shard_mb=0.00015, val_fraction=0.5)
    monkeypatch.undo()
    write_jsonl(src, second)
    assert src.stat().st_size == len(write_jsonl(tmp_path / "first.jsonl", first).read_bytes())
    prepare_corpus([src], tmp_path / "out", workers=1, shard_mb=0.00015, val_fraction=0.5)
    prepare_corpus([src], tmp_path / "fresh", workers=1, shard_mb=0.00015, val_fraction=0.5)
    assert check_shards(tmp_path / "out") == []
    assert folder_bytes(tmp_path / "out") == folder_bytes(tmp_path / "fresh")


def test_different_inputs_into_a_prepared_folder(corpus, tmp_path):
    src, _ = corpus
    out = tmp_path / "out"
    prepare_corpus([src / "a-story.txt"], out, workers=1)
    with pytest.raises(
        FileExistsError,
        match=r"holds finished shards made with a different set of inputs \(.*a-story.txt in the "
        r"folder, .*spec-0.md now\); .*--overwrite",
    ):
        prepare_corpus([src / "spec-0.md"], out, workers=1)
    with pytest.raises(FileExistsError, match=r"made with a different --val-fraction \(0.0 in the folder, 0.5 now\)"):
        prepare_corpus([src / "a-story.txt"], out, workers=1, val_fraction=0.5)
    prepare_corpus([src / "spec-0.md"], out, workers=1, overwrite=True)
    assert len(decoded_documents(out)) == 1 and check_shards(out) == []


# ------------------------------------------------------------------------------------------- bad input


def test_invalid_utf8_is_replaced_and_counted_or_fails_with_strict(tmp_path):
    (tmp_path / "bad.txt").write_bytes(b"caf\xc3\xa9 ok, then bad \xff\xfe here, and a real \xef\xbf\xbd")
    res = prepare_corpus([tmp_path / "bad.txt"], tmp_path / "o1", workers=1)
    assert res.manifest["inputs"][0]["replaced"] == 2
    assert decoded_documents(tmp_path / "o1") == ["café ok, then bad \ufffd\ufffd here, and a real \ufffd"]
    with pytest.raises(ValueError, match=r"bad.txt: invalid UTF-8 at byte offset 19 .*drop --strict"):
        prepare_corpus([tmp_path / "bad.txt"], tmp_path / "o2", workers=1, strict=True)
    lines = b'{"text": "fine"}\n{"text": "bad \xff"}\n'
    (tmp_path / "bad.jsonl").write_bytes(lines)
    with pytest.raises(ValueError, match=r"bad.jsonl, line 2: invalid UTF-8 at byte offset 31"):
        prepare_corpus([tmp_path / "bad.jsonl"], tmp_path / "o3", workers=1, strict=True)


def test_bad_json_lines(tmp_path):
    p = tmp_path / "b.jsonl"
    p.write_text(
        '{"text": "one"}\n\n{"text": "two"\n{"body": "three"}\n[1, 2]\n{"text": 5}\n{"text": ""}\n{"text": "four"}\n'
    )
    with pytest.raises(ValueError, match=r"b.jsonl, line 3: not valid JSON .*--skip-bad-lines"):
        prepare_corpus([p], tmp_path / "o", workers=1)
    p2 = tmp_path / "c.jsonl"
    p2.write_text('{"text": "one"}\n{"body": "three"}\n')
    with pytest.raises(
        ValueError,
        match=r"c.jsonl, line 2: the JSON record lacks the field 'text' \(it has 'body'\); choose the field with --field",
    ):
        prepare_corpus([p2], tmp_path / "o", workers=1, overwrite=True)
    p3 = tmp_path / "d.jsonl"
    p3.write_text('{"text": 5}\n')
    with pytest.raises(ValueError, match=r"d.jsonl, line 1: the JSON record has a non-string int in field 'text'"):
        prepare_corpus([p3], tmp_path / "o", workers=1, overwrite=True)
    res = prepare_corpus([p], tmp_path / "o", workers=1, skip_bad_lines=True, overwrite=True)
    f = res.manifest["inputs"][0]
    assert (f["documents"], f["bad_lines"], f["empty"]) == (2, 4, 1)
    assert decoded_documents(tmp_path / "o") == ["one", "four"]
    res = prepare_corpus([p2], tmp_path / "o", workers=1, field="body", skip_bad_lines=True, overwrite=True)
    assert decoded_documents(tmp_path / "o") == ["three"]


def test_empty_documents_are_skipped_and_counted(tmp_path):
    (tmp_path / "a.txt").write_text("")
    (tmp_path / "b.txt").write_text(" \n\t\n")
    (tmp_path / "c.txt").write_text("real text")
    res = prepare_corpus([tmp_path], tmp_path / "out", workers=1)
    assert [f["empty"] for f in res.manifest["inputs"]] == [1, 1, 0]
    assert decoded_documents(tmp_path / "out") == ["real text"]


def test_input_errors(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="no inputs: give files, folders"):
        prepare_corpus([], tmp_path / "o")
    with pytest.raises(FileNotFoundError, match="input .*nope.txt does not exist"):
        prepare_corpus([tmp_path / "nope.txt"], tmp_path / "o")
    with pytest.raises(ValueError, match=r"glob '.*\*.zzz' matches no file"):
        prepare_corpus([str(tmp_path / "*.zzz")], tmp_path / "o")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "image.png").write_bytes(b"\x89PNG")
    with pytest.raises(ValueError, match="folder .*empty holds no input files"):
        prepare_corpus([tmp_path / "empty"], tmp_path / "o")
    with pytest.raises(ValueError, match=r"image.png: unknown file type; .*--format text\|jsonl"):
        prepare_corpus([tmp_path / "empty" / "image.png"], tmp_path / "o")
    (tmp_path / "t.txt").write_text("x")
    with pytest.raises(ValueError, match=r"- \(standard input\) must be the only input"):
        prepare_corpus(["-", tmp_path / "t.txt"], tmp_path / "o")
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, m: False if str(p).endswith("t.txt") else real_access(p, m))
    with pytest.raises(PermissionError, match="t.txt cannot be read .*permission denied"):
        prepare_corpus([tmp_path / "t.txt"], tmp_path / "o")
    monkeypatch.undo()
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(FileExistsError, match="output .*a-file is a file; give a folder path"):
        prepare_corpus([tmp_path / "t.txt"], tmp_path / "a-file")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("precious")
    for overwrite in (False, True):
        with pytest.raises(FileExistsError, match=r"holds files that are not tokembed shards \(notes.txt\)"):
            prepare_corpus([tmp_path / "t.txt"], tmp_path / "mine", overwrite=overwrite)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "precious"


def test_option_errors(tmp_path):
    (tmp_path / "t.txt").write_text("x")
    t = [tmp_path / "t.txt"]
    with pytest.raises(ValueError, match=r"val_fraction must be in \[0, 1\), got 1.5"):
        PrepareConfig(val_fraction=1.5)
    with pytest.raises(ValueError, match="shard_mb must be > 0, got 0"):
        PrepareConfig(shard_mb=0)
    with pytest.raises(ValueError, match="field must be a non-empty string"):
        PrepareConfig(field="")
    with pytest.raises(ValueError, match="format must be one of auto, text, jsonl, parquet, got 'csv'"):
        PrepareConfig(format="csv")
    with pytest.raises(ValueError, match="workers must be an integer >= 0"):
        prepare_corpus(t, tmp_path / "o", workers=-1)
    with pytest.raises(ValueError, match="engine must be one of local, ray, got 'spark'"):
        prepare_corpus(t, tmp_path / "o", engine="spark")
    with pytest.raises(ValueError, match=r"rank must be in \[0, 2\) for world_size 2, got 2"):
        prepare_corpus(t, tmp_path / "o", rank=2, world_size=2)
    with pytest.raises(ValueError, match="tokenizer 'llama' is not available offline"):
        prepare_corpus(t, tmp_path / "o", tokenizer="llama")
    with pytest.raises(TypeError, match="pass either config or options"):
        prepare_corpus(t, tmp_path / "o", config=PrepareConfig(), field="x")


# ------------------------------------------------------------------------------------------- CLI


def test_cli_prepare_check_stats(corpus, tmp_path, capsys):
    src, docs = corpus
    out = tmp_path / "out"
    assert (
        main(["prepare", str(src), "--out", str(out), "--workers", "1", "--val-fraction", "0.3", "--shard-mb", "0.01"])
        == 0
    )
    err = capsys.readouterr().err
    assert "train:" in err and "tokens/s" in err
    assert (
        main(["prepare", str(src), "--out", str(out), "--workers", "1", "--val-fraction", "0.3", "--shard-mb", "0.01"])
        == 0
    )
    assert "nothing to do" in capsys.readouterr().err
    assert main(["check", str(out)]) == 0
    assert "OK" in capsys.readouterr().out
    assert main(["stats", str(out), "--max-length", "4", "--stride", "4", "--batch-size", "8", "--per-file"]) == 0
    text = capsys.readouterr().out
    assert "a-story.txt" in text and "5,145" in text and "0.251" in text  # 5145 tokens / 20479 characters
    assert main(["stats", str(out), "--json", "--max-length", "64", "--batch-size", "2"]) == 0
    st_ = json.loads(capsys.readouterr().out)
    n = st_["splits"]["train"]["tokens"]
    assert st_["splits"]["train"]["plan"]["windows"] == len(range(0, n - 64, 64))
    # A damaged folder: check names the file, exits 1; stats still works from the manifest.
    victim = sorted((out / "train").glob("*.bin"))[1]
    b = bytearray(victim.read_bytes())
    b[len(b) // 2] ^= 0x10
    victim.write_bytes(bytes(b))
    assert main(["check", str(out)]) == 1
    assert f"train/{victim.name}: sha256 mismatch" in capsys.readouterr().out


def test_cli_errors(tmp_path, capsys):
    assert main(["prepare", str(tmp_path / "missing.txt"), "--out", str(tmp_path / "o")]) == 2
    assert "tokembed prepare: error: input" in capsys.readouterr().err
    assert main(["stats", str(tmp_path / "none")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["check", str(tmp_path / "none")]) == 1
    assert "does not exist" in capsys.readouterr().out


def test_check_finds_planted_corruptions(corpus, tmp_path):
    src, _ = corpus
    out = tmp_path / "out"
    prepare_corpus([src], out, workers=1, shard_mb=0.01, val_fraction=0.3)
    assert check_shards(out) == []
    m = json.loads((out / "manifest.json").read_text())
    victims = {
        "flip": m["splits"]["train"]["shards"][0]["tokens"],
        "truncate": m["splits"]["val"]["shards"][0]["tokens"],
        "delete": m["splits"]["train"]["shards"][-1]["index"],
        "flip_idx": m["splits"]["train"]["shards"][1]["index"],
    }
    (out / victims["delete"]).unlink()
    with open(out / victims["truncate"], "r+b") as f:
        f.truncate(f.seek(0, 2) - 2)
    for key in ("flip", "flip_idx"):
        p = out / victims[key]
        b = bytearray(p.read_bytes())
        b[-1] ^= 0x80
        p.write_bytes(bytes(b))
    problems = check_shards(out)
    assert any(victims["flip"] in p and "sha256" in p for p in problems)
    assert any(victims["flip_idx"] in p and "sha256" in p for p in problems)
    assert any(victims["truncate"] in p and "bytes, expected" in p for p in problems)
    assert any(victims["delete"] in p and "missing" in p for p in problems)
    assert len(problems) == 4


def test_a_rank_only_removes_its_own_temporary_files(tmp_path):
    (tmp_path / "train").mkdir()
    names = [f".{u:05d}.bin.tmp-1-ab" for u in range(4)] + [".plan.json.tmp-2-cd"]
    for n in names:
        (tmp_path / "train" / n).write_bytes(b"partial")
    folder.remove_leftovers(tmp_path, rank=1, world_size=2)  # another rank may be writing units 0 and 2 now
    assert sorted(p.name for p in (tmp_path / "train").iterdir()) == [names[0], names[2], names[4]]
    folder.remove_leftovers(tmp_path)
    assert list((tmp_path / "train").iterdir()) == []
    (tmp_path / "t.txt").write_text("x")
    with pytest.raises(ValueError, match="--overwrite cannot be combined with --world-size > 1"):
        prepare_corpus([tmp_path / "t.txt"], tmp_path / "o", overwrite=True, rank=0, world_size=2)


def test_cli_quiet_prints_nothing(tmp_path, capsys):
    (tmp_path / "t.txt").write_text("some text")
    assert main(["prepare", str(tmp_path / "t.txt"), "--out", str(tmp_path / "o"), "--workers", "1", "--quiet"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
    assert decoded_documents(tmp_path / "o") == ["some text"]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(["<|endoftext|>", "<|", "|>", " ", "\n", "a", "é", "🤖", "日本", "'s", "\ud800", "12", "\t"]),
        max_size=20,
    ).map("".join)
    | st.text(max_size=80)
)
def test_fast_encoder_path_equals_encode_ordinary(text):
    # prepare encodes with encode_to_numpy (no Python list); it must be exactly encode_ordinary.
    from tokembed.tokenizer.fast import TokenEncoder

    assert TokenEncoder(ENC, backend="tiktoken").encode_ordinary(text).tolist() == ENC.encode_ordinary(text)


def test_truncated_gzip_and_missing_ray_are_clear_errors(tmp_path, monkeypatch):
    data = gzip.compress(("".join(json.dumps({"text": f"line {i}"}) + "\n" for i in range(2000))).encode())
    (tmp_path / "cut.jsonl.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"cut.jsonl.gz: cannot be read .*truncated or not gzip"):
        prepare_corpus([tmp_path / "cut.jsonl.gz"], tmp_path / "o", workers=1)
    (tmp_path / "t.txt").write_text("x")
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    with pytest.raises(ImportError, match=r"--engine ray needs Ray: pip install 'tokembed\[ray\]'"):
        prepare_corpus([tmp_path / "t.txt"], tmp_path / "o2", engine="ray")


def test_inputs_are_expanded_sorted_and_deduplicated(tmp_path):
    from tokembed.shards.sources import resolve_inputs

    for rel in [
        "b/2.md",
        "b/1.txt",
        "a.jsonl",
        "c/d/e.txt.gz",
        ".hidden/x.txt",
        "b/.secret.txt",
        "b/image.png",
        "z.ndjson.gz",
    ]:
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"")
    forward = resolve_inputs([tmp_path / "z.ndjson.gz", tmp_path, str(tmp_path / "b" / "*.md")])
    backward = resolve_inputs([str(tmp_path / "b" / "*.md"), tmp_path, tmp_path / "z.ndjson.gz"])
    assert forward == backward
    rel = [(str(Path(f.path).relative_to(tmp_path)), f.format, f.compressed) for f in forward]
    assert rel == [
        ("a.jsonl", "jsonl", False),
        ("b/1.txt", "text", False),
        ("b/2.md", "text", False),
        ("c/d/e.txt.gz", "text", True),
        ("z.ndjson.gz", "jsonl", True),
    ]
    assert resolve_inputs([tmp_path / "b" / "image.png"], format="text")[0].format == "text"


def test_library_and_cli_runs_of_the_same_settings_are_the_same_folder(tmp_path, capsys):
    (tmp_path / "t.txt").write_text("one small document")
    prepare_corpus([tmp_path / "t.txt"], tmp_path / "o", workers=1, shard_mb=8, val_fraction=0)
    assert (
        main(["prepare", str(tmp_path / "t.txt"), "--out", str(tmp_path / "o"), "--shard-mb", "8", "--workers", "2"])
        == 0
    )
    assert "nothing to do" in capsys.readouterr().err


def test_check_finds_a_tampered_manifest(corpus, tmp_path):
    src, _ = corpus
    out = tmp_path / "out"
    prepare_corpus([src], out, workers=1)
    m = json.loads((out / "manifest.json").read_text())
    m["inputs"][0]["documents"] += 1
    (out / "manifest.json").write_text(json.dumps(m))
    assert any("the inputs count" in p for p in check_shards(out))
    m["inputs"][0]["documents"] -= 1
    m["tokenizer"]["hash"] = "0" * 64
    (out / "manifest.json").write_text(json.dumps(m))
    assert any("tokenizer hash" in p and "differs from the installed 'gpt2'" in p for p in check_shards(out))
