"""Absolute positions added to the input: the chapter's learned table (as in GPT)."""

from __future__ import annotations

import torch
from torch import nn

from tokembed._checks import check_index_tensor, check_positive_int
from tokembed.embeddings.names import NoOptions
from tokembed.embeddings.scheme import ModelShape


class LearnedPositionalEmbedding(nn.Embedding):
    """A trainable (context_length, dim) table: row ``p`` is added to the token at position ``p``.

    Initialised like ``torch.nn.Embedding`` (N(0, 1)), as in the chapter.

    Shapes:
        position_ids (T,) or (B, T) integer -> (T, dim) or (B, T, dim)
    """

    def __init__(self, context_length: int, dim: int) -> None:
        check_positive_int("context_length", context_length)
        check_positive_int("dim", dim)
        super().__init__(context_length, dim)

    @classmethod
    def from_options(cls, options: NoOptions, shape: ModelShape) -> LearnedPositionalEmbedding:
        """The ``learned`` scheme's builder: one row per position of the context."""
        return cls(check_positive_int("context_length", shape.context_length), shape.dim)

    @property
    def context_length(self) -> int:
        return self.num_embeddings

    def forward(self, position_ids: torch.Tensor) -> torch.Tensor:
        position_ids = check_index_tensor(
            "position",
            position_ids,
            self.num_embeddings,
            what=f"the context length (this table holds {self.num_embeddings} positions; give a larger context_length)",
        )
        return super().forward(position_ids)
