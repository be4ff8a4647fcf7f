"""Token and positional embeddings."""

from tokembed.embeddings.absolute import LearnedPositionalEmbedding
from tokembed.embeddings.input import InputEmbedding
from tokembed.embeddings.token import TokenEmbedding

__all__ = ["InputEmbedding", "LearnedPositionalEmbedding", "TokenEmbedding"]
