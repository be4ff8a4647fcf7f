"""Which keys a query may see when packed documents are kept apart: `DocumentMask`.

A query at ``i`` sees the keys ``j <= i`` of its own document. Two ways to give attention that rule:

- the *dense* mask, (B, 1, T, T) bool, for ``scaled_dot_product_attention`` (any device; O(T^2) memory);
- FlexAttention's ``BlockMask`` (``torch.nn.attention.flex_attention``), which skips the blocks where no
  query sees any key, and the compiled ``flex_attention`` kernel that reads it: O(T) memory, and about
  the work of the documents' own lengths rather than the window's.

`DocumentMask.use_flex` chooses: FlexAttention where it is compiled for the device (CUDA, heads of at least
`FLEX_MIN_HEAD_DIM` dimensions: torch's kernel refuses narrower ones), the dense mask
elsewhere (on a CPU, torch 2.13 runs ``flex_attention`` either as an eager reference, slower than the
dense path, or after a ~1 minute compile); both give the same attention (tests/test_document_batches.py).
Set ``DocumentMask.flex = True``/``False`` to force one (None: choose by device).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ClassVar

import torch

__all__ = ["FLEX_MIN_HEAD_DIM", "DocumentMask", "flex_attention_available"]

FLEX_MIN_HEAD_DIM = 16  # torch's compiled flex_attention (CUDA) raises NotImplementedError below this head width


@functools.cache
def flex_attention_available() -> bool:
    """Whether this torch has FlexAttention (``torch.nn.attention.flex_attention``, torch >= 2.5)."""
    try:
        import torch.nn.attention.flex_attention  # noqa: F401
    except ImportError:
        return False
    return True


@functools.cache
def _compiled_flex() -> Callable[..., torch.Tensor]:
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


class DocumentMask:
    """Causal attention within documents, for a batch whose tokens belong to documents ``ids`` (B, T).

    Args:
        ids: (B, T) int document (segment) of each token; equal ids in a row are one document, and a
            document's tokens are contiguous (`tokembed.data.batch.DocumentBatch.document_ids`).

    Attributes:
        flex: class-wide choice: None (FlexAttention on CUDA, the dense mask elsewhere), True or False.
    """

    flex: ClassVar[bool | None] = None

    def __init__(self, ids: torch.Tensor) -> None:
        if ids.dim() != 2:
            raise ValueError(f"document ids must be (B, T), got shape {tuple(ids.shape)}")
        self.ids = ids
        self._block: Any = None

    @functools.cached_property
    def dense(self) -> torch.Tensor:
        """(B, 1, T, T) bool: True where query i may see key j."""
        t = self.ids.shape[1]
        same = self.ids[:, :, None] == self.ids[:, None, :]  # (B,T,T)
        causal = torch.ones(t, t, dtype=torch.bool, device=self.ids.device).tril()
        return (same & causal)[:, None]

    def use_flex(self, *, dropout: float, needs_weights: bool, head_dim: int | None = None) -> bool:
        """FlexAttention for this call? Never with attention dropout or a scheme that needs the weights
        (Shaw's value term): FlexAttention gives neither. Chosen by device (``flex`` None): on CUDA, for heads of
        ``head_dim`` >= `FLEX_MIN_HEAD_DIM` (or not given)."""
        if dropout > 0 or needs_weights or not flex_attention_available():
            return False
        if self.flex is not None:
            return self.flex
        return self.ids.is_cuda and (head_dim is None or head_dim >= FLEX_MIN_HEAD_DIM)

    def block_mask(self) -> Any:
        """FlexAttention's ``BlockMask`` of this mask (built once per batch, shared by every layer)."""
        if self._block is None:
            from torch.nn.attention.flex_attention import create_block_mask

            ids = self.ids
            b, t = ids.shape

            def within_document(bi, h, q, k):
                return (q >= k) & (ids[bi, q] == ids[bi, k])

            self._block = create_block_mask(within_document, b, None, t, t, device=ids.device)
        return self._block

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """FlexAttention of (B, H, T, d) ``q``, ``k``, ``v`` under this mask, plus ``bias`` (B|1, H|1, T, T)
        added to the scores when given: (B, H, T, d)."""
        from torch.nn.attention.flex_attention import flex_attention

        score_mod = None
        if bias is not None:
            bb, bh = bias.shape[0] > 1, bias.shape[1] > 1

            def score_mod(s, bi, h, qi, ki):
                return s + bias[bi if bb else 0, h if bh else 0, qi, ki]

        # CUDA: the compiled kernel; a CPU (forced): torch's eager reference
        fn: Callable[..., torch.Tensor] = _compiled_flex() if q.is_cuda else flex_attention  # type: ignore[assignment]
        return fn(q, k, v, score_mod=score_mod, block_mask=self.block_mask())
