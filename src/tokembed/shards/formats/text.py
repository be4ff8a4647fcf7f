"""Plain text, markdown and reStructuredText: one document per file, cut into pieces when larger than a unit.

A document larger than a unit is cut into pieces of at least ``--shard-mb`` at the points the tokenizer allows
(`tokembed.shards.sources.CUTS`: just before whitespace that follows a non-whitespace character, where the ids
of the pieces put together are the ids of the whole), counted from the document's start, so the pieces do not
depend on the units. The pieces carry `CONT` / `MORE`; the first one carries the document's head, from which the
planner decides its split. Markdown is not a format of its own: it is read exactly as text, and a separate name
would change what existing manifests record (``"format": "text"``) for ``.md`` inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from tokembed.shards.formats.base import CONT, MORE, PlanOptions, RecordContext, Span
from tokembed.shards.formats.bytes import ByteCursor, ByteFormat, find_cut

__all__ = ["TextFormat"]


class TextFormat(ByteFormat):
    """One document per file; large documents are cut into pieces at the tokenizer's safe points."""

    name = "text"
    suffixes = (".txt", ".text", ".md", ".markdown", ".rst")
    summary = "plain text, markdown, reStructuredText: one document per file"
    title = "text"
    nothing_what = "no documents (blank lines only)"

    def plan_spans(self, cur: ByteCursor, fi: int, options: PlanOptions, filled: Callable[[], int]) -> Iterator[Span]:
        cut_at = options.cut_at
        if cut_at is None:  # the tokenizer allows no cut: the document is one span, its size all the planner needs
            size = cur.end_by_reading()
            yield Span(fi, 0, size, data=cur.take(0, size), format=self.name)
            return
        pos = 0
        while True:
            cut = find_cut(cur, pos, pos + options.unit_bytes, cut_at)
            end = cur.end()
            more = end is None or cut < end
            flags = (CONT if pos > 0 else 0) | (MORE if more else 0)
            head = cur.window(0, options.head_bytes) if options.head_bytes and flags == MORE else None
            yield Span(fi, pos, cut, flags=flags, data=cur.take(pos, cut), head=head, format=self.name)
            if not more:
                return
            pos = cut

    def split(self, span: Span, part_bytes: int, name: str, cut_at: Callable[[bytes, int], int] | None) -> list[Span]:
        return [span] if cut_at is None else self._split(span, part_bytes, name, cut_at, pieces=True)

    def texts(self, span: Span, data: bytes, records: RecordContext) -> list[str]:
        return [records.decode(data, span.start)]
