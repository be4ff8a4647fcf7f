"""Where a large document may be cut without changing its ids: a property of the tokenizer's pre-tokenizer.

``prepare`` cuts a document larger than a work unit into pieces; the pieces' ids, concatenated, must be
the whole document's. That holds at a cut just before whitespace that follows a non-whitespace character
when no pre-token spans such a point and matching restarts there the same way:

* ``"whitespace"``: any ASCII whitespace (GPT-2's pattern; bytes);
* ``"space"``: a space or tab only (cl100k_base, o200k_base: they glue ``\\r\\n`` to punctuation before it);
* ``None``: no such rule is known (other patterns, most tokenizer.json files): documents stay whole.
"""

from __future__ import annotations

from typing import Any

import tiktoken

from tokembed.tokenizer.gpt2 import GPT2_PAT_STR
from tokembed.tokenizer.openai import CL100K_PAT_STR, O200K_PAT_STR

__all__ = ["document_cut"]

_BY_PATTERN = {GPT2_PAT_STR: "whitespace", CL100K_PAT_STR: "space", O200K_PAT_STR: "space"}


def document_cut(tok: Any) -> str | None:
    """``"whitespace"``, ``"space"`` or ``None`` (see the module docstring) for ``tok``."""
    if isinstance(tok, tiktoken.Encoding):
        return _BY_PATTERN.get(tok._pat_str)
    return getattr(tok, "document_cut", None)
