"""tokembed: the input stage of GPT-style language-model training.

text -> GPT-2 BPE token ids -> sliding windows -> batches -> token + positional embeddings.
"""

from tokembed.embeddings import InputEmbedding, LearnedPositionalEmbedding, TokenEmbedding
from tokembed.tokenizer import ENDOFTEXT, available_tokenizers, get_tokenizer
from tokembed.windows import GPTDatasetV1, create_dataloader_v1, encode_text, window_count

__version__ = "0.1.0"

__all__ = [
    "ENDOFTEXT",
    "GPTDatasetV1",
    "InputEmbedding",
    "LearnedPositionalEmbedding",
    "TokenEmbedding",
    "available_tokenizers",
    "create_dataloader_v1",
    "encode_text",
    "get_tokenizer",
    "window_count",
]
