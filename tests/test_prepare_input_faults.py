"""Inputs an adversarial tester found (issue 24, items 22, 23 and 25): each is a clear error naming the input, or is
read correctly and counted. References: pyarrow's and zstandard's own readers, tiktoken on the expected text."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from tokembed.shards.check import check_shards
from tokembed.shards.prepare import prepare_corpus
from tokembed.shards.reader import open_shards
from tokembed.tokenizer import get_tokenizer

ENC = get_tokenizer("gpt2")


def decoded(root: Path, split: str = "train") -> list[str]:
    return [ENC.decode(d.tolist()) for d in open_shards(root, split=split).documents()]


def test_a_file_name_that_is_not_utf8_is_named_by_its_bytes(tmp_path):
    folder = os.fsencode(tmp_path / "in")
    os.mkdir(folder)
    with open(os.path.join(folder, b"caf\xe9.txt"), "wb") as f:  # Latin-1 "café.txt"
        f.write(b"a document")
    with pytest.raises(ValueError, match=r"input file name b'.*/in/caf\\xe9.txt' is not valid UTF-8 .*rename the file"):
        prepare_corpus([tmp_path / "in"], tmp_path / "o", workers=1)
    assert not (tmp_path / "o").exists()  # refused before anything was written


def test_a_dictionary_typed_string_column_is_text(tmp_path):
    values = ["first document", None, "second one", "first document", "Ελληνικά"] * 20
    plain = pa.array(values, pa.string())
    pq.write_table(pa.table({"text": plain.dictionary_encode()}), tmp_path / "dict.parquet", row_group_size=30)
    pq.write_table(pa.table({"text": plain}), tmp_path / "plain.parquet", row_group_size=30)
    assert pa.types.is_dictionary(pq.ParquetFile(tmp_path / "dict.parquet").schema_arrow.field("text").type)
    res = prepare_corpus([tmp_path / "dict.parquet"], tmp_path / "d", workers=1, shard_mb=0.0005)
    prepare_corpus([tmp_path / "plain.parquet"], tmp_path / "p", workers=1, shard_mb=0.0005)
    assert decoded(tmp_path / "d") == decoded(tmp_path / "p") == [v for v in values if v is not None]
    assert res.manifest["inputs"][0]["empty"] == 20 and check_shards(tmp_path / "d") == []


def test_duplicate_parquet_column_names_are_named(tmp_path):
    table = pa.Table.from_arrays([pa.array(["a b"]), pa.array([1]), pa.array(["c d"])], names=["text", "n", "text"])
    pq.write_table(table, tmp_path / "dup.parquet")
    with pytest.raises(
        ValueError, match=r"dup.parquet has 2 columns named 'text' \(columns 0, 2\), so tokembed cannot tell"
    ):
        prepare_corpus([tmp_path / "dup.parquet"], tmp_path / "o", workers=1)


def test_a_zstd_frame_made_with_a_dictionary_is_called_so(tmp_path):
    samples = [json.dumps({"text": f"sample number {i} with some words"}).encode() for i in range(2000)]
    zdict = zstandard.train_dictionary(4096, samples)
    blob = zstandard.ZstdCompressor(dict_data=zdict).compress(b"\n".join(samples) + b"\n")
    assert zstandard.get_frame_parameters(blob).dict_id == zdict.dict_id() != 0
    (tmp_path / "d.jsonl.zst").write_bytes(blob)
    with pytest.raises(ValueError) as err:
        prepare_corpus([tmp_path / "d.jsonl.zst"], tmp_path / "o", workers=1)
    assert (
        f"d.jsonl.zst: frame 1 (after 0 decompressed bytes) was compressed with a zstd dictionary (id {zdict.dict_id()})"
        in str(err.value)
    )
    assert "truncated" not in str(err.value) and "zstd -d -D" in str(err.value)


def repeated(n: int) -> list[str]:
    """A few long values repeated: a tiny dictionary-encoded file of many MB of text."""
    base = ["the same long document " * 40, "another repeated text, " * 55, "a third one " * 70]
    return [base[i % 3] + str(i % 7) for i in range(n)]


@pytest.mark.parametrize("row_group_size", [500, None], ids=["small-row-groups", "one-row-group"])
def test_units_of_repeated_parquet_values_are_bounded_by_their_decoded_size(tmp_path, row_group_size):
    values = repeated(3000)  # about 2.7 MB of text
    pq.write_table(pa.table({"text": values}), tmp_path / "rep.parquet", row_group_size=row_group_size)
    text_bytes = sum(len(v.encode()) for v in values)
    assert (tmp_path / "rep.parquet").stat().st_size * 100 < text_bytes  # what the footer's sizes see
    unit = 0.05  # MB
    res = prepare_corpus([tmp_path / "rep.parquet"], tmp_path / "o", workers=1, shard_mb=unit)
    ss = open_shards(tmp_path / "o")
    longest = max(len(v.encode()) for v in values)
    per_shard = [len(ENC.decode(ss.tokens(i).tolist()).encode()) for i in range(len(ss.shards))]
    assert max(per_shard) <= unit * 1e6 + longest + 14 * 200  # a unit, one row, the <|endoftext|> between rows
    assert res.units >= text_bytes // (unit * 1e6) and sum(per_shard) > text_bytes
    assert decoded(tmp_path / "o") == values
    assert check_shards(tmp_path / "o") == []


def test_lone_surrogates_are_replaced_and_counted_or_refused(tmp_path):
    lines = ['{"text": "a \\ud800 b"}', '{"text": "pair \\ud83d\\ude00 ok"}', '{"text": "\\udfff\\ud800 two"}']
    (tmp_path / "s.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    res = prepare_corpus([tmp_path / "s.jsonl"], tmp_path / "o", workers=1)
    assert res.manifest["inputs"][0]["replaced"] == 3
    expected = ["a \ufffd b", "pair \U0001f600 ok", "\ufffd\ufffd two"]
    assert decoded(tmp_path / "o") == expected
    ss = open_shards(tmp_path / "o")
    assert ss.read(0, ss.n_tokens).tolist() == [i for t in expected for i in ENC.encode_ordinary(t) + [ENC.eot_token]]
    with pytest.raises(ValueError, match=r"s.jsonl, line 1: the text holds a lone surrogate \('\\ud800'"):
        prepare_corpus([tmp_path / "s.jsonl"], tmp_path / "o2", workers=1, strict=True)
    assert np.all(np.asarray(ss.read(0, ss.n_tokens)) < ENC.n_vocab)
