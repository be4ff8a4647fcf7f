"""The fast paths of a prepare worker against the paths they replace, which stay as the reference: a batch of
texts through one tokenizer call against one call per text, a span of JSON Lines decoded whole against line by
line, and the manifest's JSON writer against the standard library's indenting encoder. Each pair must agree
exactly (ids, texts, counts, error messages, characters)."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tokembed
from tokembed._atomic import dumps_indented
from tokembed.shards.config import PrepareConfig
from tokembed.shards.formats.base import RecordContext, Span
from tokembed.shards.formats.jsonl import JsonLinesFormat
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
    ids, offsets = encoder.encode_batch(texts)
    assert ids.dtype.name == "uint32" and offsets.dtype.name == "int64" and len(offsets) == len(texts) + 1
    ref = encoder.enc
    assert [ids[offsets[i] : offsets[i + 1]].tolist() for i in range(len(texts))] == [
        ref.encode_ordinary(t) for t in texts
    ]


def test_encode_batch_repairs_a_lone_surrogate_like_tiktoken(encoder):
    texts = ["before", "half \ud800 of a pair", "after"]
    ids, offsets = encoder.encode_batch(texts)
    assert [ids[offsets[i] : offsets[i + 1]].tolist() for i in range(3)] == [
        encoder.enc.encode_ordinary(t) for t in texts
    ]


# ------------------------------------------------------------------------------------------- lines decoded whole

_line = st.sampled_from(
    [
        b'{"text": "plain"}',
        b'{"text": "caf\xc3\xa9 \xe6\x9d\xb1"}',
        b'{"text": "escaped \\u00e9 and \\ud800 half"}',
        b'{"text": "   "}',
        b"",
        b"   \t ",
        b"\xc2\xa0",  # a no-break space: blank to Unicode, not to the line's bytes: a bad line
        b"\x0b\x0c",
        b'{"text": "bad \xff byte in a long enough line to be looked at ........................"}',
        b'{"text": "control \x01 byte"}',
        b"\x00\x01\x02\x03" * 20,
        b"not json",
        b'{"other": 1}',
        b'{"text": 5}',
        b'["text"]',
    ]
)


def _texts_and_stats(lines: list[bytes], *, fast: bool, strict: bool = False):
    fmt = JsonLinesFormat()
    data = b"\n".join(lines) + b"\n"
    span = Span(0, 100, 100 + len(data), line=7, format="jsonl")
    stats = dict.fromkeys(("documents", "tokens", "chars", "text_bytes", "empty", "replaced", "bad_lines"), 0)
    config = PrepareConfig(skip_bad_lines=True, strict=strict)
    records = RecordContext(fmt, "in.jsonl", span, config, stats)
    try:
        texts = list(fmt.texts(span, data, records) if fast else fmt._texts_by_line(span, data, records))
    except ValueError as e:
        return str(e)
    return texts, stats


@given(st.lists(_line, max_size=12))
@settings(max_examples=300, deadline=None)
def test_lines_decoded_whole_read_as_line_by_line(lines):
    assert _texts_and_stats(lines, fast=True) == _texts_and_stats(lines, fast=False)
    assert _texts_and_stats(lines, fast=True, strict=True) == _texts_and_stats(lines, fast=False, strict=True)


def test_a_bad_line_is_named_by_its_line_in_the_fast_path():
    fmt = JsonLinesFormat()
    data = b'{"text": "a"}\n{"text": "b"}\nnot json\n'
    span = Span(0, 0, len(data), line=1, format="jsonl")
    stats = dict.fromkeys(("empty", "replaced", "bad_lines"), 0)
    records = RecordContext(fmt, "in.jsonl", span, PrepareConfig(), stats)
    assert records.decode_all(data) is not None  # clean UTF-8: the fast path
    with pytest.raises(ValueError, match=r"in\.jsonl, line 3: not valid JSON \(Expecting value at column 1\)"):
        list(fmt.texts(span, data, records))


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
