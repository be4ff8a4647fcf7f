"""Stage 1, text -> ids: every tokenizer, offline.

`get_tokenizer` builds GPT-2 (the chapter's), tiktoken's ``r50k_base``, ``p50k_base``, ``cl100k_base`` and
``o200k_base``, a user's ``.tiktoken`` file, any Hugging Face ``tokenizer.json``, and ``bytes``; each is
checked against the sha256 its files must have. Every one offers the `Tokenizer` interface, and its
`TokenizerIdentity` travels with the data in the manifest.
"""

from tokembed.tokenizer.base import ENDOFTEXT, Tokenizer, TokenizerIdentity, special_tokens
from tokembed.tokenizer.cuts import document_cut
from tokembed.tokenizer.gpt2 import GPT2_ENCODER_JSON_SHA256, GPT2_PAT_STR, GPT2_VOCAB_BPE_SHA256, gpt2_files
from tokembed.tokenizer.raw_bytes import ByteTokenizer
from tokembed.tokenizer.registry import (
    available_tokenizers,
    clear_cache,
    get_tokenizer,
    identity_from_manifest,
    tokenizer_from_record,
    tokenizer_hash,
    tokenizer_identity,
    tokenizer_sources,
)

__all__ = [
    "ENDOFTEXT",
    "GPT2_ENCODER_JSON_SHA256",
    "GPT2_PAT_STR",
    "GPT2_VOCAB_BPE_SHA256",
    "ByteTokenizer",
    "Tokenizer",
    "TokenizerIdentity",
    "available_tokenizers",
    "clear_cache",
    "document_cut",
    "get_tokenizer",
    "special_tokens",
    "gpt2_files",
    "identity_from_manifest",
    "tokenizer_from_record",
    "tokenizer_hash",
    "tokenizer_identity",
    "tokenizer_sources",
]
