"""Where a large document may be cut without changing its ids: a property of the tokenizer's pre-tokenizer.

``prepare`` cuts a document larger than a work unit into pieces; the pieces' ids, concatenated, must be
the whole document's. That holds at a cut just before whitespace that follows a non-whitespace character
when no pre-token spans such a point and matching restarts there the same way. A tokenizer says which
rule holds for it in its optional ``document_cut`` attribute (see `tokembed.tokenizer.Tokenizer`):

* ``"whitespace"``: any ASCII whitespace (GPT-2's pattern; bytes);
* ``"space"``: a space or tab only (cl100k_base, o200k_base: they glue ``\\r\\n`` to punctuation before it);
* ``None`` (or no such attribute): no such rule is known (other patterns, most tokenizer.json files):
  documents stay whole. Always correct; only large single documents lose parallelism.

The byte-level search for such a point is the reader's (`tokembed.shards.sources`: one function per rule).
"""

from __future__ import annotations

from tokembed.tokenizer.base import Tokenizer
from tokembed.tokenizer.patterns import CL100K_PAT_STR, GPT2_PAT_STR, O200K_PAT_STR

__all__ = ["CUT_RULES", "cut_for_pattern", "document_cut"]

CUT_RULES = ("whitespace", "space")  # and None: never cut
_BY_PATTERN = {GPT2_PAT_STR: "whitespace", CL100K_PAT_STR: "space", O200K_PAT_STR: "space"}


def cut_for_pattern(pattern: str) -> str | None:
    """The rule a tiktoken split ``pattern`` allows (known patterns only; None for any other regex)."""
    return _BY_PATTERN.get(pattern)


def document_cut(tok: Tokenizer) -> str | None:
    """``"whitespace"``, ``"space"`` or ``None`` (see the module docstring): what ``tok`` says, checked."""
    rule = getattr(tok, "document_cut", None)
    if rule is not None and rule not in CUT_RULES:
        raise ValueError(
            f"tokenizer {getattr(tok, 'name', tok)!r} has document_cut={rule!r}; it must be one of "
            f"{', '.join(map(repr, CUT_RULES))} or None (documents stay whole: always correct)"
        )
    return rule
