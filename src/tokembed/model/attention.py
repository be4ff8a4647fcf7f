"""Causal multi-head self-attention that is given its positional scheme.

The layer knows nothing about particular schemes: it calls the hooks of the
``AttentionPositional`` object it was given (see ``tokembed.embeddings.interface``). When the
scheme leaves the weights alone, the scores go through torch's fused
``scaled_dot_product_attention`` (with the scheme's bias, if any, as a float mask); Shaw's value
term needs the weights themselves, so that scheme takes the explicit path.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from tokembed.embeddings.interface import AttentionPositional
from tokembed.model.masks import DocumentMask


class KVCache:
    """Keys, values and position ids of the tokens seen so far, one entry per layer.

    Used by ``GPT.generate``: each step feeds only the new token; its keys join the cache and its
    position continues from ``length`` (rotated keys are cached after rotation).
    """

    def __init__(self, n_layers: int) -> None:
        self.layers: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None] = [None] * n_layers
        self.length = 0  # tokens cached so far; GPT.forward advances it

    def update(
        self, layer: int, k: torch.Tensor, v: torch.Tensor, pos: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Append (B, H, T, d) keys and values at positions (T,) or (B, T); return everything cached."""
        old = self.layers[layer]
        if old is not None:
            k0, v0, p0 = old
            if p0.dim() != pos.dim():  # one side has ids per batch row: give both the batch shape
                p0, pos = (p if p.dim() == 2 else p.expand(k.shape[0], -1) for p in (p0, pos))
            k, v, pos = torch.cat((k0, k), dim=2), torch.cat((v0, v), dim=2), torch.cat((p0, pos), dim=-1)
        self.layers[layer] = (k, v, pos)
        return k, v, pos


def causal_mask(t_q: int, t_k: int, device: torch.device | None = None) -> torch.Tensor:
    """(t_q, t_k) bool, True where query i may see key j: the queries are the last t_q of t_k tokens."""
    return torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril(diagonal=t_k - t_q)


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention (GPT-2's layout: one fused q,k,v projection).

    Args:
        dim: the model width D.
        n_heads: H; D must be divisible by H (head width d = D / H).
        dropout: on the attention weights and on the output.
        positional: the scheme acting inside attention (RoPE, a score bias, Shaw), or None.
        bias: whether the projections have biases (GPT-2: yes).
        shared_positional: the caller owns ``positional`` and gives the same one to every layer
            (T5's table): it is used here but not registered, so its weights are stored once.

    Shapes:
        x (B, T, D), position_ids (T,) or (B, T) -> (B, T, D); document_ids (B, T), optional: a query
        then sees only the earlier keys of its own document (packed documents stay apart); or
        ``documents``, the same as a `DocumentMask` shared by every layer (FlexAttention where it runs).
    """

    def __init__(
        self,
        dim: int,
        n_heads: int,
        *,
        dropout: float = 0.0,
        positional: AttentionPositional | None = None,
        bias: bool = True,
        shared_positional: bool = False,
    ) -> None:
        super().__init__()
        if dim % n_heads:
            raise ValueError(
                f"dim={dim} is not divisible by n_heads={n_heads}; choose n_heads that divides dim (e.g. {_divisors_hint(dim)})"
            )
        self.dim, self.n_heads, self.head_dim = dim, n_heads, dim // n_heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=bias)
        self.proj = nn.Linear(dim, dim, bias=bias)
        self.dropout = dropout
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)
        if shared_positional:
            self.__dict__["positional"] = (
                positional  # a plain attribute: nn.Module would register it (and store it) per layer
            )
        else:
            self.positional = positional

    def forward(
        self,
        x: torch.Tensor,
        position_ids: torch.Tensor,
        *,
        cache: KVCache | None = None,
        layer: int = 0,
        document_ids: torch.Tensor | None = None,
        documents: DocumentMask | None = None,
    ) -> torch.Tensor:
        B, T, D = x.shape
        if documents is None and document_ids is not None:
            documents = DocumentMask(document_ids)
        if documents is not None and cache is not None:
            raise ValueError("document_ids cannot be combined with a KVCache; run the whole sequence at once")
        q, k, v = (
            self.qkv(x).view(B, T, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        )  # (B,H,T,d) each
        pos = self.positional
        if pos is not None:
            q, k = pos.rotate(q, k, position_ids)
        k_pos = position_ids
        if cache is not None:
            k, v, k_pos = cache.update(layer, k, v, position_ids)  # (B,H,Tk,d)
        t_k = k.shape[2]
        bias = pos.score_bias(q, position_ids, k_pos) if pos is not None else None  # (B|1,H|1,T,Tk) or None
        p = self.dropout if self.training else 0.0
        needs_weights = pos is not None and pos.needs_weights
        if documents is not None and documents.use_flex(dropout=p, needs_weights=needs_weights, head_dim=q.shape[-1]):
            y = documents.attend(q, k, v, bias)  # FlexAttention: only the blocks a document sees
            return self.resid_dropout(self.proj(y.transpose(1, 2).reshape(B, T, D)))
        visible = None if documents is None else documents.dense  # (B,1,T,T) bool; None: the plain causal mask
        if pos is not None and needs_weights:
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)  # (B,H,T,Tk)
            if bias is not None:
                scores = scores + bias
            scores = scores.masked_fill(
                ~(visible if visible is not None else causal_mask(T, t_k, x.device)), float("-inf")
            )
            weights = self.attn_dropout(torch.softmax(scores, dim=-1))  # (B,H,T,Tk)
            y = weights @ v  # (B,H,T,d)
            extra = pos.value_term(weights, position_ids, k_pos)
            if extra is not None:
                y = y + extra
        elif bias is not None:
            mask = bias.masked_fill(
                ~(visible if visible is not None else causal_mask(T, t_k, x.device)), float("-inf")
            )  # -inf hides keys
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        elif visible is not None:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=visible, dropout_p=p)  # True: may attend
        elif t_k == T:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=p)
        else:  # new queries after cached keys: is_causal would align the mask at the top-left corner
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(T, t_k, x.device), dropout_p=p)
        y = y.transpose(1, 2).reshape(B, T, D)  # (B,H,T,d) -> (B,T,D)
        return self.resid_dropout(self.proj(y))


def _divisors_hint(n: int) -> str:
    return ", ".join(str(h) for h in range(1, min(n, 16) + 1) if n % h == 0)
