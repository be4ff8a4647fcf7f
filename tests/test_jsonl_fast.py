"""JSON Lines through orjson (the fast path, with ``tokembed[fast]``) against the reference way it falls back to
(decode the line, json.loads, the shared record rules): the same texts, counts and error messages for any line,
and the same shard folder."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokembed.shards.config import PrepareConfig
from tokembed.shards.formats import jsonl
from tokembed.shards.formats.base import RecordContext, Span
from tokembed.shards.formats.jsonl import ORJSON_MAX_DEPTH, JsonLinesFormat

pytest.importorskip("orjson")

_value = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)
_field = st.sampled_from(["text", "body"]) | st.text(max_size=3)
# whole lines: objects json writes (ASCII or not), and the lines where the two parsers could differ
_line = st.one_of(
    st.builds(
        lambda d, a: json.dumps(d, ensure_ascii=a).encode(), st.dictionaries(_field, _value, max_size=4), st.booleans()
    ),
    st.builds(lambda t, a: json.dumps({"text": t}, ensure_ascii=a).encode(), st.text(), st.booleans()),
    st.sampled_from(
        [
            b'{"text": "a", "text": "b"}',  # duplicate keys: the last one
            b'{"text": "\\ud800 lone"}',  # a lone surrogate escape: replaced and counted, or an error under --strict
            b'{"text": "\\ud83d\\ude00 pair"}',
            b'{"text": "bad \xff byte"}',  # invalid UTF-8
            b'{"text": "\xed\xa0\x80 encoded surrogate"}',
            b'{"text": "ctrl \x01 byte"}' + b"\x01" * 70,  # control bytes: mostly not text
            b'{"text": "tab\tinside"}',
            b'{"text": "x", "n": NaN}',
            b'{"text": "x", "n": 1e400}',
            b'{"text": "x", "n": 99999999999999999999999}',
            b'{"text": "x", "n": 1' + b"0" * 5000 + b"}",  # past Python's 4,300 digits
            b'\xef\xbb\xbf{"text": "bom"}',
            b'{"text": "crlf"}\r',
            b'  {"text": "spaces around"}  ',
            b'{"text": 5}',
            b'{"text": null}',
            b'{"body": "other field"}',
            b'["text"]',
            b'"text"',
            b"not json",
            b'{"text": "trailing",}',
            b'{"text": "a"} {"text": "b"}',
            b'{"text": "   "}',
            b'{"text": ""}',
            b"",
            b"   ",
            b"\x0b\x0c",
        ]
    ),
)


def _run(lines: list[bytes], *, fast: bool, strict: bool, skip: bool, monkeypatch) -> object:
    """The texts and counts of one span of ``lines``, or the error message."""
    import orjson

    monkeypatch.setattr(jsonl, "_ORJSON", orjson.loads if fast else None)
    data = b"\n".join(lines) + b"\n"
    span = Span(0, 100, 100 + len(data), data=data, line=7, format="jsonl")
    stats = dict.fromkeys(("documents", "tokens", "chars", "text_bytes", "empty", "replaced", "bad_lines"), 0)
    fmt = JsonLinesFormat()
    records = RecordContext(fmt, "in.jsonl", span, PrepareConfig(strict=strict, skip_bad_lines=skip), stats)
    try:
        return list(fmt.texts(span, data, records)), stats
    except ValueError as e:
        return str(e)


@given(lines=st.lists(_line, max_size=8), strict=st.booleans(), skip=st.booleans())
@settings(max_examples=400, deadline=None)
def test_orjson_gives_what_json_gives(lines, strict, skip):
    with pytest.MonkeyPatch.context() as mp:
        assert _run(lines, fast=True, strict=strict, skip=skip, monkeypatch=mp) == _run(
            lines, fast=False, strict=strict, skip=skip, monkeypatch=mp
        )


def test_each_difference_goes_the_reference_way(monkeypatch):
    """The messages of the reference path, word for word, through the fast path."""
    cases = {
        b'{"text": "\\ud800"}': r"in.jsonl, line 7: .*lone surrogate",
        b'{"text": "\xff"}': r"in.jsonl, line 7: invalid UTF-8 at byte offset 110",
        b'{"text": "x", "n": 1' + b"0" * 5000 + b"}": r"line 7: not valid JSON \(Exceeds the limit \(4300 digits\)",
        b'{"text": 5}': r"line 7: the JSON record has a non-string int in field 'text' \(it has 'text'\)",
        b'{"body": "x"}': r"line 7: the JSON record lacks the field 'text' \(it has 'body'\)",
        b"[1]": r"line 7: the JSON record lacks the field 'text'; choose the field with --field",
    }
    for line, message in cases.items():
        got = _run([line], fast=True, strict=True, skip=False, monkeypatch=monkeypatch)
        assert isinstance(got, str), line
        assert got == _run([line], fast=False, strict=True, skip=False, monkeypatch=monkeypatch)
        assert pytest.raises(ValueError, _raise, got).match(message)
    got = _run(
        [b'{"text": "\\ud800 x"}', b'{"text": "ok", "n": NaN}'],
        fast=True,
        strict=False,
        skip=False,
        monkeypatch=monkeypatch,
    )
    assert got == (
        ["\ufffd x", "ok"],
        {**dict.fromkeys(("documents", "tokens", "chars", "text_bytes", "empty", "bad_lines"), 0), "replaced": 1},
    )


def _raise(message: str):
    raise ValueError(message)


def test_clean_lines_never_take_the_reference_way(monkeypatch):
    """orjson's result is used for an ordinary record (else the fast path would be no faster)."""
    called = []
    monkeypatch.setattr(JsonLinesFormat, "line_text", lambda self, *a: called.append(a))
    lines = [json.dumps({"text": f"doc {i} naïve 東京", "meta": {"a": [1, {"b": None}]}}).encode() for i in range(50)]
    texts, _ = _run(lines, fast=True, strict=True, skip=False, monkeypatch=monkeypatch)
    assert texts == [f"doc {i} naïve 東京" for i in range(50)] and not called


@pytest.mark.parametrize("depth", [ORJSON_MAX_DEPTH - 1, ORJSON_MAX_DEPTH, ORJSON_MAX_DEPTH + 1, 990, 1010, 1030])
def test_deep_records_are_read_as_json_reads_them(depth, monkeypatch):
    """orjson reads 1,024 levels; json stops at Python's recursion limit: past `ORJSON_MAX_DEPTH`, json decides."""
    line = b'{"text": "deep", "x": ' + b"[" * depth + b"]" * depth + b"}"
    for strict in (True, False):
        fast = _run([line], fast=True, strict=strict, skip=True, monkeypatch=monkeypatch)
        assert fast == _run([line], fast=False, strict=strict, skip=True, monkeypatch=monkeypatch)


def test_prepare_writes_the_same_bytes_with_and_without_orjson(tmp_path, monkeypatch):
    import orjson

    from tokembed.shards.prepare import prepare_corpus

    lines = [json.dumps({"text": f"document {i}: " + "naïve café 東京 " * (i % 7), "id": i}) for i in range(300)]
    lines += ['{"text": "\\ud800 lone"}', '{"text": "a", "text": "dup"}', "", "  ", '{"text": "\\u00e9\\n"}']
    (tmp_path / "in.jsonl").write_bytes(("\n".join(lines) + "\n").encode() + b'{"text": "bad \xff"}\n')

    def run(out: str, loads) -> dict[str, bytes]:
        monkeypatch.setattr(jsonl, "_ORJSON", loads)
        prepare_corpus([tmp_path / "in.jsonl"], tmp_path / out, workers=1, val_fraction=0.2, shard_mb=0.01)
        return {str(p.relative_to(tmp_path / out)): p.read_bytes() for p in (tmp_path / out).rglob("*") if p.is_file()}

    with_orjson, reference = run("orjson", orjson.loads), run("json", None)
    assert with_orjson == reference and any(k.startswith("val/") for k in reference)
    assert json.loads(reference["manifest.json"])["inputs"][0]["replaced"] == 2
