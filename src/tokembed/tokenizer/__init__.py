"""Stage 1, text -> ids: every tokenizer, offline, behind one contract (`Tokenizer`).

`get_tokenizer` builds GPT-2 (the chapter's), tiktoken's ``r50k_base``, ``p50k_base``, ``cl100k_base`` and
``o200k_base``, a user's ``.tiktoken`` file, any Hugging Face ``tokenizer.json``, ``bytes``, and any tokenizer a
user registers (`register_tokenizer`, or the entry point group ``tokembed.tokenizers``); built-in ones are
checked against the sha256 their files must have. Every stage reads a tokenizer only through `Tokenizer`'s
members (tiktoken's private tables are read in `tiktoken_adapter` alone), and its `TokenizerIdentity`
travels with the data in the manifest.
"""

from tokembed.tokenizer.base import (
    ENDOFTEXT,
    Tokenizer,
    TokenizerIdentity,
    TokenizerLike,
    TokenizerMismatch,
    encode_ordinary_batch,
    encode_with_specials,
    vocabulary_hash,
)
from tokembed.tokenizer.cuts import document_cut
from tokembed.tokenizer.gpt2 import GPT2_ENCODER_JSON_SHA256, GPT2_PAT_STR, GPT2_VOCAB_BPE_SHA256, gpt2_files
from tokembed.tokenizer.raw_bytes import ByteTokenizer
from tokembed.tokenizer.registry import (
    ENTRY_POINT_GROUP,
    as_tokenizer,
    available_tokenizers,
    clear_cache,
    get_tokenizer,
    identity_from_manifest,
    register_tokenizer,
    special_tokens,
    tokenizer_from_record,
    tokenizer_hash,
    tokenizer_identity,
    tokenizer_sources,
    unregister_tokenizer,
)
from tokembed.tokenizer.tiktoken_adapter import TiktokenTokenizer

__all__ = [
    "ENDOFTEXT",
    "ENTRY_POINT_GROUP",
    "GPT2_ENCODER_JSON_SHA256",
    "GPT2_PAT_STR",
    "GPT2_VOCAB_BPE_SHA256",
    "ByteTokenizer",
    "TiktokenTokenizer",
    "Tokenizer",
    "TokenizerIdentity",
    "TokenizerLike",
    "TokenizerMismatch",
    "as_tokenizer",
    "available_tokenizers",
    "clear_cache",
    "document_cut",
    "encode_ordinary_batch",
    "encode_with_specials",
    "get_tokenizer",
    "gpt2_files",
    "identity_from_manifest",
    "register_tokenizer",
    "special_tokens",
    "tokenizer_from_record",
    "tokenizer_hash",
    "tokenizer_identity",
    "tokenizer_sources",
    "unregister_tokenizer",
    "vocabulary_hash",
]
