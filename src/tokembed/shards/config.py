"""TODO docstring."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from tokembed.shards.sources import FORMATS


@dataclass(frozen=True)
class PrepareConfig:
    """Everything that decides the bytes of a shard folder (recorded in its manifest).

    Attributes:
        tokenizer: tokenizer name for `tokembed.get_tokenizer` (offline: ``"gpt2"``).
        field: the JSON Lines field, or the Parquet column, holding the text.
        format: ``"auto"`` (by suffix), or ``"text"``, ``"jsonl"``, ``"parquet"`` for files with another suffix
            (and ``"text"`` or ``"jsonl"`` for stdin).
        val_fraction: fraction of documents in the ``val`` split, chosen by a hash of each document's text
            (deterministic; identical documents always land in the same split).
        shard_mb: raw input per work unit (= per shard), in MB. Memory is bounded by about
            ``shard_mb`` times the units in flight; smaller units balance the workers better, larger
            ones make fewer files (raise it to 100-1000 for terabyte corpora).
        strict: fail on invalid UTF-8 (naming file and byte offset) instead of replacing it with U+FFFD.
        skip_bad_lines: skip and count JSON lines that are not valid JSON or lack ``field``, instead of failing.
    """

    tokenizer: str = "gpt2"
    field: str = "text"
    format: str = "auto"
    val_fraction: float = 0.0
    shard_mb: float = 8.0
    strict: bool = False
    skip_bad_lines: bool = False

    def __post_init__(self):
        if not isinstance(self.field, str) or not self.field:
            raise ValueError(f"field must be a non-empty string, got {self.field!r}")
        if self.format not in FORMATS:
            raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {self.format!r}")
        if isinstance(self.val_fraction, bool) or not (
            isinstance(self.val_fraction, (int, float)) and 0.0 <= self.val_fraction < 1.0
        ):
            raise ValueError(
                f"val_fraction must be in [0, 1), got {self.val_fraction!r}; e.g. 0.01 keeps 1% of the documents for validation"
            )
        if (
            isinstance(self.shard_mb, bool)
            or not isinstance(self.shard_mb, (int, float))
            or not (math.isfinite(self.shard_mb) and self.shard_mb > 0)
        ):
            raise ValueError(f"shard_mb must be > 0, got {self.shard_mb!r}; 8 to 256 MB of input per shard is typical")
        # Recorded in the manifest: 8 and 8.0 must compare equal there, so store floats.
        object.__setattr__(self, "shard_mb", float(self.shard_mb))
        object.__setattr__(self, "val_fraction", float(self.val_fraction))

    @property
    def unit_bytes(self) -> int:
        return max(1, int(self.shard_mb * 1e6))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
