"""Parquet inputs: written here with pyarrow (and `datasets`), prepared, and decoded back to the column's strings."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tokembed.shards.units as units
from tokembed.cli import main
from tokembed.shards.check import check_shards
from tokembed.shards.prepare import prepare_corpus
from tokembed.shards.reader import open_shards
from tokembed.tokenizer import get_tokenizer

ENC = get_tokenizer("gpt2")


def folder_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def decoded(root: Path, split: str = "train") -> list[str]:
    return [ENC.decode(d.tolist()) for d in open_shards(root, split=split).documents()]


def column(n: int, seed: int) -> list[str | None]:
    """Documents of varied sizes with a null, an empty and a blank string, non-ASCII text, and one document
    of 120 KB (larger than the 50 KB shards the tests use)."""
    rng = random.Random(seed)
    words = ["the", "verdict", "Ελληνικά", "日本語の文章", "🤖", "naïve", "<|endoftext|>", "\n\n", "  ", "x,y"]
    out: list[str | None] = [" ".join(rng.choices(words, k=rng.randint(1, 400))) for _ in range(n)]
    out[3], out[7], out[11] = None, "", "  \n "
    out[n // 2] = "A large document. " + " ".join(rng.choices(words, k=20_000))
    return out


def kept(col: list[str | None]) -> list[str]:
    return [s for s in col if s is not None and s.strip()]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Two files of the same column: one in row groups of 40 rows (each read by a worker), one in a single
    row group larger than a shard (read by the planner, cut at rows); and a third column of other text."""
    d = tmp_path_factory.mktemp("parquet")
    col = column(400, seed=1)
    table = pa.table({"id": list(range(len(col))), "text": col, "meta": [{"lang": "en"}] * len(col)})
    pq.write_table(table, d / "a-groups.parquet", row_group_size=40)
    pq.write_table(table, d / "b-one-group.parquet")
    other = column(150, seed=2)
    pq.write_table(
        pa.table({"text": pa.array(other, pa.large_string())}), d / "c-large-string.parquet", row_group_size=7
    )
    return d, kept(col) * 2 + kept(other), (col, other)


def test_round_trip_gives_back_the_non_empty_strings_in_order(corpus, tmp_path):
    src, docs, (col, other) = corpus
    res = prepare_corpus([src], tmp_path / "out", workers=1, shard_mb=0.05)
    assert res.units > 10
    assert decoded(tmp_path / "out") == docs
    ss = open_shards(tmp_path / "out", verify=True)
    expected = [t for d in docs for t in ENC.encode_ordinary(d) + [ENC.eot_token]]  # the tokenizer, per document
    assert ss.read(0, ss.n_tokens).tolist() == expected
    a, b, c = res.manifest["inputs"]
    assert a["format"] == "parquet" and a["empty"] == b["empty"] == len(col) - len(kept(col)) >= 3  # null, "", blank
    assert a["documents"] == b["documents"] == len(kept(col)) and c["documents"] == len(kept(other))
    assert check_shards(tmp_path / "out") == []


@pytest.mark.slow
def test_one_and_two_workers_parts_and_ranks_give_the_same_bytes(corpus, tmp_path, monkeypatch):
    src = corpus[0]
    prepare_corpus([src], tmp_path / "w1", workers=1, shard_mb=0.05, val_fraction=0.3)
    prepare_corpus([src], tmp_path / "w2", workers=2, shard_mb=0.05, val_fraction=0.3)
    assert folder_bytes(tmp_path / "w1") == folder_bytes(tmp_path / "w2")
    for r in range(3):
        prepare_corpus([src], tmp_path / "ranks", workers=1, shard_mb=0.05, val_fraction=0.3, rank=r, world_size=3)
    assert main(["merge", str(tmp_path / "ranks")]) == 0
    assert folder_bytes(tmp_path / "w1") == folder_bytes(tmp_path / "ranks")
    monkeypatch.setattr(units, "PART_BYTES", 3000)  # rows the planner read are cut into small parts
    prepare_corpus([src], tmp_path / "parts", workers=2, shard_mb=0.05, val_fraction=0.3)
    assert folder_bytes(tmp_path / "w1") == folder_bytes(tmp_path / "parts")


def test_the_same_column_as_json_lines_gives_the_same_tokens(corpus, tmp_path):
    import json

    src, docs = corpus[:2]
    with open(tmp_path / "docs.jsonl", "w", encoding="utf-8") as f:
        for i, d in enumerate(docs):
            f.write(json.dumps({"text": d, "i": i}) + "\n")
    prepare_corpus([src], tmp_path / "pq", workers=1, shard_mb=0.05, val_fraction=0.3)
    prepare_corpus([tmp_path / "docs.jsonl"], tmp_path / "js", workers=1, shard_mb=0.05, val_fraction=0.3)
    for split in ("train", "val"):
        a, b = open_shards(tmp_path / "pq", split=split), open_shards(tmp_path / "js", split=split)
        assert a.read(0, a.n_tokens).tolist() == b.read(0, b.n_tokens).tolist()


def test_a_file_written_by_datasets_prepares_like_one_written_by_pyarrow(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    datasets = pytest.importorskip("datasets", reason="the cross-check needs `datasets` (in the dev extra)")
    col = column(300, seed=3)
    datasets.Dataset.from_dict({"text": col}).to_parquet(str(tmp_path / "hf.parquet"), batch_size=50)
    pq.write_table(pa.table({"text": col}), tmp_path / "pa.parquet", row_group_size=50)
    assert pq.ParquetFile(tmp_path / "hf.parquet").metadata.num_row_groups == 6
    prepare_corpus([tmp_path / "hf.parquet"], tmp_path / "hf", workers=1, shard_mb=0.05)
    prepare_corpus([tmp_path / "pa.parquet"], tmp_path / "pa", workers=1, shard_mb=0.05)
    assert decoded(tmp_path / "hf") == decoded(tmp_path / "pa") == kept(col)
    assert folder_bytes(tmp_path / "hf" / "train") == folder_bytes(tmp_path / "pa" / "train")


def test_one_process_tokenizes_the_rows_the_planner_decoded_without_reading_them_again(tmp_path, monkeypatch):
    """In one process, a dictionary-encoded row group the planner decoded to size it is not read again: the bytes
    are those of workers that read each group themselves, and the text is the column's."""
    import tokembed.shards.formats.parquet as pqf

    col = column(300, seed=5)
    col[20:60] = [col[21]] * 40  # repeated values: the dictionary stores them once
    col[100:103] = [None, "x " * 3000, None]
    table = pa.table({"text": col})
    pq.write_table(table, tmp_path / "dict.parquet", row_group_size=30)  # pyarrow's default: dictionary-encoded
    pq.write_table(table, tmp_path / "plain.parquet", row_group_size=30, use_dictionary=False)
    assert pq.ParquetFile(tmp_path / "dict.parquet").metadata.row_group(0).column(0).has_dictionary_page
    kw = dict(shard_mb=0.2, val_fraction=0.3)
    prepare_corpus([tmp_path / "dict.parquet"], tmp_path / "w2", workers=2, **kw)  # each worker reads its group
    monkeypatch.setattr(pqf, "BATCH_BYTES", 3000)  # several batches per group
    real, reads = pqf.read_rows, []

    def counted(span, path):
        if span.data is None:  # (otherwise it gives back the span's rows)
            reads.append(span.group)
        return real(span, path)

    monkeypatch.setattr(pqf, "read_rows", counted)
    prepare_corpus([tmp_path / "dict.parquet"], tmp_path / "w1", workers=1, **kw)
    assert reads == []  # every group was sized by the planner and tokenized from what it read
    assert folder_bytes(tmp_path / "w1") == folder_bytes(tmp_path / "w2")
    prepare_corpus([tmp_path / "plain.parquet"], tmp_path / "plain", workers=1, **kw)  # sized by the footer
    assert reads  # a plain-encoded group is read by the worker, as before
    for split in ("train", "val"):
        a, b = open_shards(tmp_path / "w1", split=split), open_shards(tmp_path / "plain", split=split)
        assert a.read(0, a.n_tokens).tolist() == b.read(0, b.n_tokens).tolist()
    assert sorted(decoded(tmp_path / "w1") + decoded(tmp_path / "w1", "val")) == sorted(kept(col))


def test_resume_after_a_crash_is_byte_identical(corpus, tmp_path, monkeypatch):
    import tokembed.shards.prepare as prep

    src = corpus[0]
    prepare_corpus([src], tmp_path / "ref", workers=1, shard_mb=0.05)
    real, calls = prep.write_unit, []

    def crash_on_the_sixth(out, result, dtype):
        calls.append(result["unit"])
        if len(calls) == 6:
            raise KeyboardInterrupt  # as if killed in the middle of the run
        return real(out, result, dtype)

    monkeypatch.setattr(prep, "write_unit", crash_on_the_sixth)
    with pytest.raises(KeyboardInterrupt):
        prepare_corpus([src], tmp_path / "out", workers=1, shard_mb=0.05)
    monkeypatch.setattr(prep, "write_unit", real)
    res = prepare_corpus([src], tmp_path / "out", workers=1, shard_mb=0.05)
    assert res.units_skipped == 5 and res.units_done == res.units - 5
    assert folder_bytes(tmp_path / "ref") == folder_bytes(tmp_path / "out")


# ----------------------------------------------------------------------------------------------- bad input


def test_column_errors_list_the_string_columns(tmp_path):
    table = pa.table({"content": ["a b"], "url": ["u"], "n": [1], "meta": [{"body": "x"}]})
    pq.write_table(table, tmp_path / "t.parquet")
    t = [tmp_path / "t.parquet"]
    with pytest.raises(
        ValueError,
        match=r"t.parquet has no column 'text'; its string columns are 'content', 'url': name one with --field",
    ):
        prepare_corpus(t, tmp_path / "o", workers=1)  # --field left at its default, text
    with pytest.raises(ValueError, match=r"column 'n' holds int64, not text; its string columns are 'content', 'url'"):
        prepare_corpus(t, tmp_path / "o", workers=1, field="n")
    with pytest.raises(
        ValueError, match=r"--field 'meta.body' is inside the struct column 'meta'; .* top-level string column"
    ):
        prepare_corpus(t, tmp_path / "o", workers=1, field="meta.body")
    pq.write_table(pa.table({"n": [1, 2]}), tmp_path / "ints.parquet")
    with pytest.raises(ValueError, match=r"it has no string column \(columns: n int64\)"):
        prepare_corpus([tmp_path / "ints.parquet"], tmp_path / "o", workers=1)
    res = prepare_corpus(t, tmp_path / "ok", workers=1, field="content")
    assert res.manifest["splits"]["train"]["documents"] == 1


def test_truncated_file_and_file_without_rows(tmp_path, capsys):
    pq.write_table(pa.table({"text": column(200, seed=4)}), tmp_path / "full.parquet", row_group_size=20)
    data = (tmp_path / "full.parquet").read_bytes()
    (tmp_path / "cut.parquet").write_bytes(data[: len(data) * 2 // 3])  # an interrupted download
    with pytest.raises(
        ValueError, match=r"cut.parquet: not a readable Parquet file \(.*footer.*\); .*download it again"
    ):
        prepare_corpus([tmp_path / "cut.parquet"], tmp_path / "o", workers=1)
    pq.write_table(pa.table({"text": pa.array([], pa.string())}), tmp_path / "none.parquet")
    assert main(["prepare", str(tmp_path / "none.parquet"), "--out", str(tmp_path / "o2"), "--workers", "1"]) == 2
    assert "hold no documents to tokenize (" + str(tmp_path / "none.parquet") + ": no rows)" in capsys.readouterr().err
    pq.write_table(pa.table({"text": pa.array([None, "", " "], pa.string())}), tmp_path / "blank.parquet")
    with pytest.raises(ValueError, match=r"blank.parquet: 3 empty document\(s\) or null value\(s\)"):
        prepare_corpus([tmp_path / "blank.parquet"], tmp_path / "o3", workers=1)
    # Among other inputs, a file without rows is no error: it adds nothing.
    res = prepare_corpus([tmp_path / "none.parquet", tmp_path / "full.parquet"], tmp_path / "o4", workers=1)
    assert [f["documents"] for f in res.manifest["inputs"]] == [len(kept(column(200, seed=4))), 0]  # sorted by path


def test_a_damaged_row_group_is_named(tmp_path):
    col = [f"document {i} " * 20 for i in range(500)]
    pq.write_table(
        pa.table({"text": col}),
        tmp_path / "ok.parquet",
        row_group_size=100,
        write_page_checksum=True,
        use_dictionary=False,
    )
    chunk = pq.ParquetFile(tmp_path / "ok.parquet").metadata.row_group(2).column(0)
    data = bytearray((tmp_path / "ok.parquet").read_bytes())
    data[chunk.data_page_offset + chunk.total_compressed_size // 2] ^= 0x40  # one flipped bit inside row group 2
    (tmp_path / "flip.parquet").write_bytes(bytes(data))
    with pytest.raises(
        ValueError, match=r"flip.parquet, row group 2: cannot be read \(.*CRC checksum verification failed"
    ):
        prepare_corpus([tmp_path / "flip.parquet"], tmp_path / "o", workers=1)


def test_errors_name_the_file_row_group_and_row(tmp_path):
    values = [f"row {i} text".encode() for i in range(100)]
    values[57] = b"bad \xff\xfe utf-8 in an otherwise ordinary value"
    text = pa.array(values, pa.binary()).view(pa.string())  # Arrow takes these bytes as they are
    pq.write_table(pa.table({"text": text}), tmp_path / "bad.parquet", row_group_size=25)
    with pytest.raises(ValueError, match=r"bad.parquet, row group 2, row 57: invalid UTF-8 at byte offset 4 "):
        prepare_corpus([tmp_path / "bad.parquet"], tmp_path / "o", workers=1, strict=True)
    res = prepare_corpus([tmp_path / "bad.parquet"], tmp_path / "o2", workers=1)
    assert res.manifest["inputs"][0]["replaced"] == 2 and res.manifest["inputs"][0]["documents"] == 100


def test_stdin_cannot_be_parquet(tmp_path):
    with pytest.raises(ValueError, match="Parquet cannot be read from standard input"):
        prepare_corpus("-", tmp_path / "o", format="parquet")


def test_cli_prepares_parquet_with_a_field(tmp_path):
    pq.write_table(pa.table({"content": ["one document", "another one"]}), tmp_path / "x.parquet")
    cmd = [sys.executable, "-m", "tokembed", "prepare", str(tmp_path / "x.parquet"), "--out", str(tmp_path / "o")]
    proc = subprocess.run(
        [*cmd, "--field", "content", "--workers", "1"], capture_output=True, text=True, env=dict(os.environ)
    )
    assert proc.returncode == 0, proc.stderr
    assert decoded(tmp_path / "o") == ["one document", "another one"]
