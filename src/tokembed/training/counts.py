"""How many times training read each token id: the counts that travel with a checkpoint.

Every batch the loop trains on adds its input ids (the ids the token embedding looked up; the
targets are the same stream shifted by one) to a (V,) int64 tensor. The checkpoint stores it as
``token_counts.safetensors`` (one tensor, ``"counts"``), beside the weights it describes, and a
resumed run continues from it. Inspection reads these counts to rank tokens by frequency and to
mark the tokens training barely saw (``tokembed.inspection.undertrained``).
"""

from __future__ import annotations

from pathlib import Path

import torch

from tokembed._checks import check_int

__all__ = ["COUNTS_FILE", "MIN_COUNT", "TokenCounter", "check_min_count", "read_token_counts"]

COUNTS_FILE = "token_counts.safetensors"
# A token read fewer times than this is under-trained: its row has barely moved from where it started
# (--min-count changes it in `tokembed inspect` and `report`; the isotropy log of training uses it).
MIN_COUNT = 10


def check_min_count(min_count) -> int:
    """``min_count`` as an int >= 0, else an error naming it."""
    return check_int(
        "min_count", min_count, min=0, noun="an integer", hint="tokens read fewer times are marked under-trained"
    )


class TokenCounter:
    """A (V,) count of the token ids read so far.

    Args:
        vocab_size: the model's vocabulary (the length of the counts).
    """

    def __init__(self, vocab_size: int) -> None:
        self.counts = torch.zeros(vocab_size, dtype=torch.int64)  # (V,)

    def add(self, ids: torch.Tensor) -> None:
        """Count a batch of ids, any shape (the model has already checked their range)."""
        flat = ids.detach().reshape(-1).to("cpu", torch.int64)  # (B*T,)
        # O(B*T): a bincount with minlength=V would write all V counts every step
        self.counts.index_put_((flat,), torch.ones_like(flat), accumulate=True)

    def write(self, path: Path) -> None:
        """Write ``token_counts.safetensors`` at ``path`` (inside a checkpoint being saved)."""
        from safetensors.torch import save_file

        save_file({"counts": self.counts.contiguous()}, str(path), metadata={"what": "input token ids read by train"})

    def restore(self, checkpoint: Path) -> bool:
        """Continue from a checkpoint's counts; False when it has none (written before counts were recorded)."""
        counts = read_token_counts(checkpoint)
        if counts is None or counts.shape != self.counts.shape:
            return False
        self.counts = counts
        return True


def read_token_counts(checkpoint: str | Path) -> torch.Tensor | None:
    """(V,) int64 counts recorded in a checkpoint directory, or None if it records none.

    Raises:
        ValueError: the file is there but is not the counts tensor.
    """
    path = Path(checkpoint) / COUNTS_FILE
    if not path.is_file():
        return None
    from safetensors import SafetensorError

    from tokembed.model.checkpoint import read_safetensors

    try:
        counts = read_safetensors(path).get("counts")
    except SafetensorError as e:
        raise ValueError(f"{path} is not a readable safetensors file ({e}); the checkpoint is damaged") from e
    if counts is None or counts.ndim != 1 or counts.dtype != torch.int64 or bool((counts < 0).any()):
        raise ValueError(
            f"{path} holds no (V,) int64 'counts' tensor of non-negative counts; the checkpoint is damaged"
        )
    return counts
