"""Open an embedding table from wherever it is: a checkpoint, an exported table, GPT-2's own weights."""

from __future__ import annotations

import json
from pathlib import Path

from tokembed._paths import local_path
from tokembed.inspection.table import EmbeddingTable
from tokembed.model.checkpoint import CHECKPOINT_FORMAT
from tokembed.tokenizer.base import TokenizerLike

__all__ = ["is_tokembed_checkpoint", "load_table"]


def is_tokembed_checkpoint(path: Path) -> bool:
    # True for a folder whose config.json names our format, or is damaged (the checkpoint reader says how).
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except OSError:
        return False
    except ValueError:
        return True
    return isinstance(config, dict) and config.get("format") == CHECKPOINT_FORMAT


def load_table(
    source: str | Path, *, tokenizer: TokenizerLike | None = "gpt2", allow_unverified: bool = False
) -> EmbeddingTable:
    """Open any embedding table: a checkpoint directory, an exported table, or GPT-2's own weights.

    Args:
        source: a ``tokembed train`` checkpoint directory; a ``.npy`` or ``.safetensors`` table from
            ``tokembed export``; GPT-2's ``model.safetensors`` / ``pytorch_model.bin`` / the book's
            ``model.pth``, or a folder holding one.
        tokenizer: for tables that do not name theirs (``.npy``, GPT-2 weights).
        allow_unverified: open a checkpoint without sha256.json (written before tokembed 0.2).

    Raises:
        FileNotFoundError: nothing at ``source``.
        ValueError: ``source`` is none of the above.
    """
    path = local_path(source, what="the table")
    if not path.exists():
        raise FileNotFoundError(
            f"{path} does not exist; pass a checkpoint directory, a .npy/.safetensors table or GPT-2 weights"
        )
    if path.is_dir():
        if is_tokembed_checkpoint(path) or not any(
            (path / name).is_file() for name in ("model.safetensors", "pytorch_model.bin", "model.pth", "model.pt")
        ):
            # also says what is wrong with a folder that is neither
            return EmbeddingTable.from_checkpoint(path, allow_unverified=allow_unverified)
        return EmbeddingTable.from_gpt2(path, tokenizer=tokenizer)  # a Hugging Face snapshot folder
    if path.suffix in (".npy", ".safetensors"):
        return EmbeddingTable.from_file(path, tokenizer=tokenizer)
    if path.suffix in (".bin", ".pt", ".pth", ".ckpt"):
        return EmbeddingTable.from_gpt2(path, tokenizer=tokenizer)
    raise ValueError(
        f"{path} is not an embedding table or checkpoint (unknown suffix {path.suffix!r}); pass a checkpoint directory, "
        "a .npy/.safetensors table, or GPT-2's model.safetensors / pytorch_model.bin / model.pth"
    )
