"""JSON Lines (``.jsonl``, ``.ndjson``): one document per line, its text in a string field (``--field``).

With orjson installed (``tokembed[fast]``) a line is parsed from its bytes by orjson first: 2.5x faster than
decoding it and running json's scanner (benchmarks/bench_tokenize.py --profile). Its result is used only where it
is json's own: an object whose field is a string, nested at most `ORJSON_MAX_DEPTH` deep. orjson refuses
everything else where the two could differ (invalid UTF-8, control bytes, lone surrogate escapes, NaN, numbers out
of a double's range, BOMs), and such a line, or one that is not such an object, goes the reference way (decode,
json, the shared record rules) with its messages and counts (tests/test_jsonl_fast.py compares the two).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from tokembed.shards.formats.base import RecordContext, Span
from tokembed.shards.formats.bytes import LinesFormat

__all__ = ["JsonLinesFormat"]


def _json_problem(e: Exception) -> str:
    """What is wrong with a line ``json.loads`` refused, in a few words."""
    if isinstance(e, json.JSONDecodeError):
        msg = e.msg.removesuffix(" at")  # json says "Unterminated string starting at" (then the position)
        return f"{msg} at column {e.colno}"
    if isinstance(e, RecursionError):
        return "nested too deeply to parse"
    return str(e).split(";")[0]  # "Exceeds the limit (4300 digits) for integer string conversion: ..."


_SCAN = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # json.loads' own (C) scanner, set by JSONDecoder.__init__ (typeshed omits it)


def _loads(text: str) -> Any:  # -> the JSON value
    """``json.loads(text)``: an object line with nothing around it goes straight to json's scanner (json.loads
    would match whitespace at both ends first); anything else, and any error, through json.loads itself."""
    if text[:1] == "{" and text[-1:] == "}":
        try:
            obj, end = _SCAN(text, 0)
        except (StopIteration, ValueError, RecursionError):
            pass  # json.loads raises its own error for it below
        else:
            if end == len(text):
                return obj
    return json.loads(text)


ORJSON_MAX_DEPTH = 64  # deeper, json.loads could hit Python's recursion limit where orjson (1,024 levels) does not


def _orjson_loads() -> Callable[[bytes], Any] | None:
    """``orjson.loads`` when orjson is installed (the optional extra ``tokembed[fast]``), else None."""
    global _ORJSON
    if _ORJSON is False:
        try:
            import orjson

            _ORJSON = orjson.loads
        except ImportError:
            _ORJSON = None
    return _ORJSON


_ORJSON: Any = False  # (not looked up yet)


def _shallow(obj: dict[str, Any] | list[Any], depth: int = 1) -> bool:
    """Whether the containers in ``obj`` nest at most `ORJSON_MAX_DEPTH` deep (a flat record: one look per value)."""
    for v in obj.values() if isinstance(obj, dict) else obj:
        if isinstance(v, (dict, list)) and (depth >= ORJSON_MAX_DEPTH or not _shallow(v, depth + 1)):
            return False
    return True


class JsonLinesFormat(LinesFormat):
    """One JSON object per line; the document is its string field ``--field``. Blank lines are skipped; a line
    that is not an object with that string field is an error naming the line (``--skip-bad-lines``: counted)."""

    name = "jsonl"
    suffixes = (".jsonl", ".ndjson")
    summary = "JSON Lines: one document per line, its text in the string field --field"
    title = "JSON Lines"
    nothing_what = "no documents (blank lines only)"
    bad_what = "bad JSON line(s) skipped"

    def texts(self, span: Span, data: bytes, records: RecordContext) -> Iterator[str]:
        loads = _orjson_loads()
        if loads is None:
            yield from super().texts(span, data, records)
            return
        field, offset = records.field, span.start
        for k, raw in enumerate(data.split(b"\n")):  # the last item follows the final newline: blank
            if raw and not raw.isspace():  # (= raw.strip(), without a copy)
                try:
                    obj = loads(raw)
                except (ValueError, RecursionError):  # (orjson.JSONDecodeError is a ValueError)
                    obj = None
                value = obj.get(field) if isinstance(obj, dict) else None
                if isinstance(value, str) and _shallow(obj):  # valid UTF-8, no control byte, no lone surrogate
                    yield value
                else:  # the reference way, with its messages and counts
                    text = self.line_text(records.decode(raw, offset, k), records, offset, k)
                    if text is not None:
                        yield text
            offset += len(raw) + 1

    def line_text(self, text: str, records: RecordContext, offset: int, k: int) -> str | None:
        field = records.field
        try:
            obj = _loads(text)
        except (ValueError, RecursionError) as e:  # JSONDecodeError is a ValueError, as is a 5,000-digit integer
            records.bad(offset, k, f"not valid JSON ({_json_problem(e)}); fix the line or pass --skip-bad-lines")
            return None
        value = obj.get(field) if isinstance(obj, dict) else None
        if isinstance(value, str):
            # A \ud800 escape is half of a UTF-16 pair: no text. Only an escape can make one, so look only then.
            return records.unicode(value, offset, k) if "\\u" in text else value
        if not isinstance(obj, dict) or field not in obj:
            what = "lacks the field"
        else:
            what = f"has a non-string {type(value).__name__} in field"
        keys = f" (it has {', '.join(map(repr, list(obj)[:8]))})" if isinstance(obj, dict) else ""
        records.bad(
            offset,
            k,
            f"the JSON record {what} {field!r}{keys}; choose the field with --field, or pass --skip-bad-lines",
        )
        return None
