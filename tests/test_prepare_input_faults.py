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


def _planned_arrow_peak(path: Path, unit_bytes: int) -> tuple[int, int]:
    """Plan ``path`` (spans carrying their rows, as Ray's driver does), dropping each span as it comes: the most
    memory pyarrow held at any span, and the text bytes planned."""
    from tokembed.shards.sources import plan_units, resolve_inputs

    peak, text = 0, 0
    for spans, _ in plan_units(resolve_inputs([str(path)]), unit_bytes, carry=True):
        peak = max(peak, pa.total_allocated_bytes())
        text += sum(len(sp) for sp in spans)
    return peak, text


def test_a_large_row_group_is_cut_in_bounded_memory(tmp_path):
    """One row group of 24 MB of distinct text (pyarrow's writer keeps 1 MB of it in a dictionary page and writes
    the rest plainly): cut at rows, it is read in batches, never held whole (dictionary-encoding its plain pages
    kept about twice the group's text in pyarrow)."""
    rng = np.random.default_rng(0)
    words = np.array(["alpha", "beta", "gamma", "delta", "naïve", "日本語", "x"])
    values = [" ".join(rng.choice(words, size=int(n))) for n in rng.integers(50, 800, size=8000)]
    pq.write_table(pa.table({"text": values}), tmp_path / "one.parquet", row_group_size=len(values))
    text_bytes = sum(len(v.encode()) for v in values)
    assert pq.ParquetFile(tmp_path / "one.parquet").metadata.num_row_groups == 1 and text_bytes > 20e6
    peak, planned = _planned_arrow_peak(tmp_path / "one.parquet", 1 << 20)
    assert planned == text_bytes
    assert peak < 16e6, f"pyarrow held {peak / 1e6:.0f} MB planning a {text_bytes / 1e6:.0f} MB row group"


def test_a_row_group_repeating_its_longest_value_is_cut_in_bounded_memory(tmp_path, monkeypatch):
    """A few KB on disk, 20 MB of text: every row the same 20 KB dictionary value. The batches of a group cut at
    rows are sized by the longest value of its dictionary, not by the stored bytes per row (a few bytes)."""
    import tokembed.shards.formats.parquet as pqf

    monkeypatch.setattr(pqf, "CUT_BATCH_BYTES", 2 << 20)
    values = ["the same twenty-kilobyte document " * 600] * 1000
    pq.write_table(pa.table({"text": values}), tmp_path / "rep.parquet", row_group_size=len(values))
    assert (tmp_path / "rep.parquet").stat().st_size < 100_000
    peak, planned = _planned_arrow_peak(tmp_path / "rep.parquet", 1 << 20)
    assert planned == 1000 * len(values[0])
    assert peak < 8e6, f"pyarrow held {peak / 1e6:.0f} MB for batches of at most 2 MiB of text"


def test_one_long_dictionary_value_among_short_rows_keeps_batches_of_many_rows(tmp_path, monkeypatch):
    """The guard against a repeated long value costs a long value that does not repeat no more than batches of
    GUARD_ROWS rows (one row per batch made planning 10x slower)."""
    import tokembed.shards.formats.parquet as pqf

    values = ["one long document " * 180_000] + [f"short row {i} " * 4 for i in range(20_000)]  # 3 MB, then 1 MB
    pq.write_table(pa.table({"text": values}), tmp_path / "long.parquet", row_group_size=len(values))
    assert pqf.CUT_BATCH_BYTES // len(values[0]) < pqf.GUARD_ROWS  # the longest value alone would allow 5 rows
    real, batches = pqf.ParquetPlan._batches, []

    def counted(self, g, size, *, cut=False):
        for b in real(self, g, size, cut=cut):
            batches.append(len(b))
            yield b

    monkeypatch.setattr(pqf.ParquetPlan, "_batches", counted)
    peak, planned = _planned_arrow_peak(tmp_path / "long.parquet", 1 << 20)
    assert planned == sum(len(v.encode()) for v in values)
    assert len(batches) <= len(values) // pqf.GUARD_ROWS + 2 and max(batches) == pqf.GUARD_ROWS


def test_a_column_whose_values_share_bytes_is_read_not_called_damaged(tmp_path):
    """DELTA_BYTE_ARRAY (each value stored as the previous one's prefix length + a suffix) has no dictionary:
    it is read as it is (pyarrow cannot keep a dictionary for it)."""
    values = repeated(300)
    values[7] = None
    kw = dict(use_dictionary=False, row_group_size=100)
    pq.write_table(
        pa.table({"text": values}), tmp_path / "d.parquet", column_encoding={"text": "DELTA_BYTE_ARRAY"}, **kw
    )
    pq.write_table(pa.table({"text": values}), tmp_path / "p.parquet", **kw)
    assert "DELTA_BYTE_ARRAY" in pq.ParquetFile(tmp_path / "d.parquet").metadata.row_group(0).column(0).encodings
    for workers in (1, 2):
        prepare_corpus([tmp_path / "d.parquet"], tmp_path / f"d{workers}", workers=workers, shard_mb=0.05)
    prepare_corpus([tmp_path / "p.parquet"], tmp_path / "p", workers=1, shard_mb=0.05)
    assert decoded(tmp_path / "d1") == decoded(tmp_path / "d2") == [v for v in values if v is not None]
    a, b = open_shards(tmp_path / "d1"), open_shards(tmp_path / "p")
    assert a.read(0, a.n_tokens).tolist() == b.read(0, b.n_tokens).tolist()
    # 50 MB of text in one row group of 1,000 rows that share a 50 KB prefix: 50 KB stored, read in bounded batches
    big = ["the shared prefix " * 2800 + str(i) for i in range(1000)]
    delta = {"text": "DELTA_BYTE_ARRAY"}
    pq.write_table(pa.table({"text": big}), tmp_path / "big.parquet", column_encoding=delta, use_dictionary=False)
    assert (tmp_path / "big.parquet").stat().st_size < 200_000
    peak, planned = _planned_arrow_peak(tmp_path / "big.parquet", 1 << 20)
    assert planned == sum(len(v) for v in big) and peak < 12e6, f"pyarrow held {peak / 1e6:.0f} MB"


def _footer_rows(tmp_path: Path, rows: int) -> Path:
    """A file whose footer says row group 0 has ``rows`` rows; its pages hold 100."""
    import struct

    p = tmp_path / "f.parquet"
    pq.write_table(pa.table({"text": [f"v{i % 5}" for i in range(100)]}), p, row_group_size=100, write_statistics=False)
    raw = p.read_bytes()
    start = len(raw) - 8 - struct.unpack("<I", raw[-8:-4])[0]
    footer = bytearray(raw[start:-8])
    i = footer.rindex(b"\xc8\x01")  # 100 as a zigzag varint: the last is the row group's num_rows
    footer[i : i + 2] = bytes([(2 * rows) & 0x7F | 0x80, (2 * rows) >> 7])
    p.write_bytes(raw[:start] + bytes(footer) + raw[-8:])
    assert pq.ParquetFile(p).metadata.row_group(0).num_rows == rows and pq.read_table(p).num_rows == 100
    return p


@pytest.mark.parametrize("shard_mb", [1, 0.0001], ids=["whole-group", "cut-at-rows"])
@pytest.mark.parametrize("workers", [1, 2])
def test_a_footer_that_counts_other_rows_than_the_pages_hold_is_an_error(tmp_path, workers, shard_mb):
    """Whoever reads the rows (the planner, in one process or cutting a group larger than a unit; a worker
    otherwise), the run stops with the same error instead of reading the rows shifted."""
    p = _footer_rows(tmp_path, 101)
    with pytest.raises(
        ValueError, match=r"f.parquet changed while it was being prepared \(row group 0 has 100 rows, not 101\)"
    ):
        prepare_corpus([p], tmp_path / "out", workers=workers, shard_mb=shard_mb)


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
