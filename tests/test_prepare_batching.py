"""The fast paths of a prepare worker against what they replace, which stays as the reference: many texts
through one call against a call per text, a JSON line through json's scanner
against json.loads, Parquet values decoded directly against the shared record rules, and the manifest's JSON
writer against the standard library's indenting encoder. Each pair must agree exactly (ids, texts, counts,
error messages, characters)."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tokembed
from tokembed._atomic import dumps_indented
from tokembed.shards.config import PrepareConfig
from tokembed.shards.formats.base import RecordContext
from tokembed.tokenizer.fast import TokenEncoder

# ------------------------------------------------------------------------------------------- JSON writer

_keys = st.text(max_size=6)
_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8)
_json = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(_keys, inner, max_size=5),
    max_leaves=40,
)


@given(_json)
@settings(max_examples=300, deadline=None)
def test_dumps_indented_writes_what_json_writes(obj):
    assert dumps_indented(obj) == json.dumps(obj, indent=1, sort_keys=True, ensure_ascii=False)


@given(st.dictionaries(st.integers() | st.booleans() | st.none() | st.floats(allow_nan=False), _scalars, max_size=6))
@settings(max_examples=100, deadline=None)
def test_dumps_indented_non_string_keys_of_a_flat_dict(obj):
    try:
        expected = json.dumps(obj, indent=1, sort_keys=True, ensure_ascii=False)
    except TypeError as e:  # keys of several types cannot be sorted: the same error
        with pytest.raises(TypeError, match=re.escape(str(e))):
            dumps_indented(obj)
        return
    assert dumps_indented(obj) == expected


def test_dumps_indented_token_counts_and_nested_containers():
    counts = {str(i): i * 7 % 13 + 1 for i in range(5000)}  # sorted as strings: "10" before "2"
    manifest = {"token_counts": {"train": counts, "val": {}}, "splits": {"train": {"shards": [{"a": 1}, []]}}}
    assert dumps_indented(manifest) == json.dumps(manifest, indent=1, sort_keys=True, ensure_ascii=False)
    mixed = {"x": {1: [1]}, "y": 2}  # a non-string key beside a container: left to json, which writes it
    assert dumps_indented(mixed) == json.dumps(mixed, indent=1, sort_keys=True, ensure_ascii=False)


# ------------------------------------------------------------------------------------------- batch encode

_texts = st.lists(
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)
    | st.sampled_from(["", " ", "\n\n", "<|endoftext|>", "a" * 700, "naïve 東京 🤖"]),
    max_size=12,
)


@pytest.fixture(scope="module", params=["tiktoken", "gigatoken"])
def encoder(request):
    return TokenEncoder(tokembed.get_tokenizer("gpt2"), backend=request.param)


@given(texts=_texts)
@settings(max_examples=150, deadline=None)
def test_encode_batch_gives_each_texts_ids(encoder, texts):
    arrays = encoder.encode_batch(texts)
    assert all(a.dtype.name == "uint32" for a in arrays)
    assert [a.tolist() for a in arrays] == [encoder.enc.encode_ordinary(t) for t in texts]


def test_encode_batch_repairs_a_lone_surrogate_like_tiktoken(encoder):
    texts = ["before", "half \ud800 of a pair", "after"]
    assert [a.tolist() for a in encoder.encode_batch(texts)] == [encoder.enc.encode_ordinary(t) for t in texts]


# ------------------------------------------------------------------------------------------- JSON lines and rows


def _outcome(fn, text):
    try:
        return "ok", json.dumps(fn(text), sort_keys=True)
    except (ValueError, RecursionError) as e:
        return type(e).__name__, str(e)


_fragments = st.sampled_from(
    ['{"text": ', '"a\\u00e9\\ud800"', "1e999", "NaN", "[", "]", "{", "}", ",", " ", ":", '"k"']
)


@given(_json.map(json.dumps) | st.lists(_fragments, max_size=12).map("".join) | st.text(max_size=20))
@settings(max_examples=400, deadline=None)
def test_a_line_parses_as_json_loads_parses_it(text):
    from tokembed.shards.formats.jsonl import _loads

    for line in (text, "{" + text + "}", '{"text": ' + text + "}"):
        assert _outcome(_loads, line) == _outcome(json.loads, line)


_value = st.sampled_from(
    [b"plain", b"caf\xc3\xa9", b"bad \xff byte" + b"." * 70, b"\xe6\x9d", b"\xb1", None, b"ctl \x01" * 20, b""]
)


@given(st.lists(_value, max_size=10))
@settings(max_examples=200, deadline=None)
def test_parquet_rows_decode_as_one_by_one(values):
    import numpy as np

    from tokembed.shards.formats.parquet import ParquetFormat, RowSpan, row_records

    lengths = np.array([-1 if v is None else len(v) for v in values], dtype="<i8")
    data = lengths.tobytes() + b"".join(v for v in values if v is not None)
    span = RowSpan(0, 10, 10 + len(values), format="parquet")

    def run(fast: bool):
        stats = dict.fromkeys(("empty", "replaced", "bad_lines"), 0)
        records = RecordContext(ParquetFormat(), "in.parquet", span, PrepareConfig(), stats)
        try:
            if fast:
                return list(ParquetFormat().texts(span, data, records)), stats
            out = []
            for raw, row, k in row_records(span, data):  # the reference: each row through the shared rules
                if raw is None:
                    records.empty()
                else:
                    out.append(records.decode(raw, row, k, bytes_from=0))
            return out, stats
        except ValueError as e:
            return str(e)

    assert run(True) == run(False)


def test_token_counts_from_the_workers_are_the_files_counts(tmp_path):
    """The manifest's token_counts, added up from the workers' counts of each part, are what counting the shard files
    gives (the way a resumed run counts the units it found finished), whichever units come from where."""
    import numpy as np

    from tokembed.shards.counts import SplitCounts, part_counts, split_token_counts
    from tokembed.shards.prepare import prepare_corpus

    lines = [json.dumps({"text": f"doc {i} " + "naïve café 東京 " * (i % 5) + "x" * (i % 90)}) for i in range(600)]
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "s"
    manifest = prepare_corpus([tmp_path / "in.jsonl"], out, workers=2, val_fraction=0.3, shard_mb=0.01).manifest
    assert manifest is not None and manifest["units"] > 2
    from_files = split_token_counts(out, manifest)
    assert manifest["token_counts"] == from_files and set(from_files) == {"train", "val"}
    known = SplitCounts()  # every other shard counted "by a worker", in two parts, the rest read from its file
    for split, info in manifest["splits"].items():
        for shard in info["shards"][::2]:
            ids = np.fromfile(out / shard["tokens"], dtype=np.uint16)
            for half in (ids[: len(ids) // 2], ids[len(ids) // 2 :]):
                known.add(split, *part_counts(half))
            known.files.add(shard["tokens"])
    assert split_token_counts(out, manifest, known) == from_files
