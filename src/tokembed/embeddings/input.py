"""The input of the model: token embedding + positional embedding, as in the chapter."""

from __future__ import annotations

import torch
from torch import nn

from tokembed._checks import check_positive_int, check_probability
from tokembed.embeddings.absolute import LearnedPositionalEmbedding
from tokembed.embeddings.token import TokenEmbedding


class InputEmbedding(nn.Module):
    """ids (B, T) -> token embedding + embedding of positions 0..T-1 -> (B, T, dim).

    Both tables are trainable. The token table is created first, then the position table,
    so under the same seed the weights equal the chapter's two ``nn.Embedding`` layers.

    Args:
        vocab_size: rows of the token table.
        dim: the embedding width.
        context_length: the longest sequence the position table covers.
        dropout: dropout on the sum (GPT-2 uses 0.1 while training).
    """

    def __init__(self, vocab_size: int, dim: int, context_length: int, *, dropout: float = 0.0) -> None:
        super().__init__()
        self.token = TokenEmbedding(vocab_size, dim)
        self.position = LearnedPositionalEmbedding(context_length, dim)
        self.dropout = nn.Dropout(check_probability("dropout", dropout))
        self.context_length = check_positive_int("context_length", context_length)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        tok = self.token(ids)  # (B,T) -> (B,T,D); checks the ids' type and range first
        if ids.dim() != 2:
            raise ValueError(f"ids must have shape (batch, seq_len), got shape {tuple(ids.shape)}; add a batch dimension with ids.unsqueeze(0)")
        T = ids.shape[1]
        if T > self.context_length:
            raise ValueError(f"sequence length {T} exceeds context_length {self.context_length}; use windows of at most {self.context_length} tokens or a larger context_length")
        pos = self.position(torch.arange(T, device=ids.device))  # (T,D)
        return self.dropout(tok + pos)  # (B,T,D) + (T,D) -> (B,T,D)
