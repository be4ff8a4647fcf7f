"""The token embedding: a trainable (vocab_size, dim) table, one row per token id."""

from __future__ import annotations

import torch
from torch import nn

from tokembed._checks import check_index_tensor, check_positive_int

INITS = ("normal", "gpt2")


class TokenEmbedding(nn.Embedding):
    """A ``torch.nn.Embedding`` that names bad ids instead of "index out of range in self".

    Args:
        vocab_size: rows of the table (50,257 for GPT-2's BPE).
        dim: the width of each token's vector.
        init: ``"normal"`` initialises exactly like ``torch.nn.Embedding`` (N(0, 1), the same draws
            from torch's generator, so ``torch.manual_seed(123); TokenEmbedding(6, 3)`` is the
            chapter's table); ``"gpt2"`` draws N(0, 0.02) as GPT-2 does.

    Shapes:
        ids (*) integer -> (*, dim)
    """

    def __init__(self, vocab_size: int, dim: int, *, init: str = "normal") -> None:
        check_positive_int("vocab_size", vocab_size)
        check_positive_int("dim", dim)
        if init not in INITS:
            raise ValueError(f"init must be one of {', '.join(INITS)}, got {init!r}")
        super().__init__(vocab_size, dim)  # N(0, 1), exactly nn.Embedding's draws
        self.init = init
        if init == "gpt2":
            nn.init.normal_(self.weight, mean=0.0, std=0.02)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        ids = check_index_tensor("token id", ids, self.num_embeddings, what="the vocabulary")  # any integer dtype
        return super().forward(ids)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, init={self.init!r}"
