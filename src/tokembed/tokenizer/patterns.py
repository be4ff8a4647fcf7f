"""The split patterns (pre-tokenizer regexes) of tiktoken's encodings, by name.

GPT-2's is tiktoken's ``r50k_pat_str``; cl100k_base's and o200k_base's are tiktoken's own
(tiktoken_ext/openai_public.py; tests keep all three in sync). A user's ``.tiktoken`` file names one of
these (``--pattern cl100k_base``) or gives its own regex. What a pattern lets ``prepare`` cut at lives in
`tokembed.tokenizer.cuts`; which patterns the fast backend implements, in `tokembed.tokenizer.fast`.
"""

from __future__ import annotations

__all__ = ["CL100K_PAT_STR", "GPT2_PAT_STR", "O200K_PAT_STR", "PATTERNS"]

GPT2_PAT_STR = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
CL100K_PAT_STR = r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
O200K_PAT_STR = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
# Split patterns by encoding name: a user's .tiktoken file names one of these, or gives its own regex.
PATTERNS = {
    "gpt2": GPT2_PAT_STR,
    "r50k_base": GPT2_PAT_STR,
    "p50k_base": GPT2_PAT_STR,
    "cl100k_base": CL100K_PAT_STR,
    "o200k_base": O200K_PAT_STR,
}
