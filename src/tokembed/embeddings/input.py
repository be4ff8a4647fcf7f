"""The input of the model: token embedding + positional embedding, as in the chapter.

``positional`` names the scheme (see ``tokembed.embeddings.names``). A scheme that acts on the input
(the chapter's learned table, the sinusoidal one) is added here; the other schemes act inside
attention, and then this module returns the token embeddings alone.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from tokembed._checks import check_int, check_positive_int, check_probability, long_ids
from tokembed.embeddings.names import positional_scheme
from tokembed.embeddings.scheme import ModelShape
from tokembed.embeddings.token import TokenEmbedding


class InputEmbedding(nn.Module):
    """ids (B, T) -> token embedding + embedding of positions 0..T-1 -> (B, T, dim).

    Both tables are trainable. The token table is created first, then the position table,
    so under the same seed the weights equal the chapter's two ``nn.Embedding`` layers.

    Args:
        vocab_size: rows of the token table.
        dim: the embedding width.
        context_length: the longest sequence the position table covers (learned positions);
            the other schemes read sequences of any length.
        dropout: dropout on the sum (GPT-2 uses 0.1 while training).
        positional: ``"learned"`` (the chapter's), ``"sinusoidal"``, or a scheme that acts
            inside attention (``"rope"``, ``"alibi"``, ``"t5"``, ``"shaw"``, ``"none"``), for
            which nothing is added here.
        positional_options: the scheme's options (its dataclass, a dict, or None for its defaults).
    """

    def __init__(
        self,
        vocab_size: int,
        dim: int,
        context_length: int,
        *,
        dropout: float = 0.0,
        positional: str = "learned",
        positional_options: Any = None,
    ) -> None:
        super().__init__()
        self.scheme = positional_scheme(positional)
        self.token = TokenEmbedding(vocab_size, dim)  # first: under one seed the tables equal the chapter's
        shape = ModelShape(dim=dim, context_length=context_length)
        # The scheme's module when it acts on the input; None when positions act in attention.
        self.position = self.scheme.module(positional_options, shape) if self.scheme.acts == "input" else None
        self.dropout = nn.Dropout(check_probability("dropout", dropout))
        self.context_length = check_positive_int("context_length", context_length)

    @property
    def positional(self) -> str:
        return self.scheme.name

    def forward(
        self,
        ids: torch.Tensor,
        *,
        position_ids: torch.Tensor | None = None,
        offset: int = 0,
        return_positions: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Embed ``ids``.

        Args:
            ids: (B, T) token ids.
            position_ids: (T,) or (B, T) positions, any integer dtype; default ``offset, ..., offset + T - 1``.
            offset: the first position when ``position_ids`` is not given (e.g. after a cache).
            return_positions: also return the position ids used (for schemes inside attention).

        Returns:
            (B, T, dim), and the (T,) or (B, T) position ids if ``return_positions``.
        """
        tok = self.token(ids)  # (B,T) -> (B,T,D); checks the ids' type and range first
        if ids.dim() != 2:
            raise ValueError(
                f"ids must have shape (batch, seq_len), got shape {tuple(ids.shape)}; add a batch dimension with ids.unsqueeze(0)"
            )
        B, T = ids.shape
        if position_ids is None:
            check_int("offset", offset, min=0, noun="an integer")
            if self.scheme.bounded and offset + T > self.context_length:
                if offset:
                    raise ValueError(
                        f"positions {offset}..{offset + T - 1} exceed context_length {self.context_length} of the learned position table; crop the context to the last {self.context_length} tokens"
                    )
                raise ValueError(
                    f"sequence length {T} exceeds context_length {self.context_length}; use windows of at most {self.context_length} tokens or a larger context_length"
                )
            position_ids = torch.arange(offset, offset + T, device=ids.device)  # (T,)
        else:
            if (
                not isinstance(position_ids, torch.Tensor)
                or position_ids.dtype.is_floating_point
                or position_ids.dtype.is_complex
                or position_ids.dtype == torch.bool
            ):
                raise TypeError(
                    f"position_ids must be an integer tensor, got {getattr(position_ids, 'dtype', type(position_ids).__name__)}"
                )
            # uint8/int16/uint16 ... as int64: unsigned `key - query` would wrap (ALiBi, T5, Shaw), and torch has no
            # min or gather for some of them; int32 (a DocumentBatch's) and int64 stay as they are
            position_ids = long_ids(position_ids)
            if position_ids.shape not in ((T,), (B, T)):
                raise ValueError(
                    f"position_ids must have shape ({T},) or ({B}, {T}) to match ids {tuple(ids.shape)}, got {tuple(position_ids.shape)}"
                )
            if position_ids.numel() and position_ids.min().item() < 0:
                raise ValueError(f"position ids must be >= 0, got {position_ids.min().item()}")
        x = tok
        if self.position is not None:
            x = tok + self.position(position_ids)  # (B,T,D) + (T,D) or (B,T,D) -> (B,T,D)
        x = self.dropout(x)
        return (x, position_ids) if return_positions else x
