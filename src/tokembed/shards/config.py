"""`PrepareConfig`: every option that decides the bytes of a shard folder, validated once and recorded in its manifest.

Options that change only how fast the same bytes are written (workers, engine, ranks) are arguments of
`tokembed.shards.prepare.prepare_corpus`, not fields here: a rerun with other values resumes the same folder.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokembed.shards.sources import check_format_name

if TYPE_CHECKING:  # the tokenizer stage imports tiktoken: only when a tokenizer is built
    from tokembed.tokenizer.base import Tokenizer

BACKENDS = ("auto", "tiktoken", "gigatoken")  # tokembed.tokenizer.fast.BACKENDS (not imported: it needs tiktoken)


def _absolute_if_file(tokenizer: str) -> str:
    """A tokenizer file's absolute path (the manifest then names it from any folder); names stay names."""
    path = Path(tokenizer).expanduser()
    is_file = path.suffix in (".json", ".tiktoken") or (path / "tokenizer.json").is_file()
    return str(path.resolve()) if is_file else tokenizer


@dataclass(frozen=True)
class PrepareConfig:
    """Everything that decides the bytes of a shard folder (recorded in its manifest).

    Attributes:
        tokenizer: a name or file for `tokembed.get_tokenizer` (``"gpt2"``, ``"o200k_base"``, a tokenizer.json, ...).
        pattern: the split pattern of a ``.tiktoken`` tokenizer file (a regex or an encoding's name).
        eot: the end-of-text token of a tokenizer file that does not use ``<|endoftext|>``.
        backend: who encodes: ``"auto"`` (gigatoken when installed and exact for the tokenizer, else
            tiktoken), ``"tiktoken"`` or ``"gigatoken"``. Not recorded: the shards are identical either way.
        field: the JSON Lines field, or the Parquet column, holding the text.
        format: ``"auto"`` (by suffix), or the name of a registered input format (``"text"``, ``"jsonl"``,
            ``"parquet"``, ...: `tokembed.shards.formats`) for files with another suffix and for stdin.
        val_fraction: fraction of documents in the ``val`` split, chosen by a hash of each document's text
            (deterministic; identical documents always land in the same split).
        shard_mb: raw input per work unit (= per shard), in MB. Memory is bounded by about
            ``shard_mb`` times the units in flight; smaller units balance the workers better, larger
            ones make fewer files (raise it to 100-1000 for terabyte corpora).
        strict: fail on invalid UTF-8 (naming file and byte offset) instead of replacing it with U+FFFD.
        skip_bad_lines: skip and count JSON lines that are not valid JSON or lack ``field``, instead of failing.
    """

    tokenizer: str = "gpt2"
    pattern: str | None = None
    eot: str | None = None
    backend: str = "auto"
    field: str = "text"
    format: str = "auto"
    val_fraction: float = 0.0
    shard_mb: float = 8.0
    strict: bool = False
    skip_bad_lines: bool = False

    def __post_init__(self):
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        if not isinstance(self.tokenizer, (str, os.PathLike)):  # the manifest records a name that rebuilds it
            raise TypeError(
                f"prepare takes a tokenizer's name or file, got {self.tokenizer!r}: register it "
                "(tokembed.register_tokenizer(name, build)) and pass the name, which the manifest records"
            )
        object.__setattr__(self, "tokenizer", _absolute_if_file(os.fspath(self.tokenizer)))
        if not isinstance(self.field, str) or not self.field:
            raise ValueError(f"field must be a non-empty string, got {self.field!r}")
        check_format_name(self.format)
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
        """What decides the shards' bytes (the manifest's ``config``): not the backend, and no unset
        ``pattern``/``eot`` (so a gpt2 run records what earlier versions did)."""
        d = dataclasses.asdict(self)
        del d["backend"]
        return {k: v for k, v in d.items() if not (k in ("pattern", "eot") and v is None)}

    def build_tokenizer(self) -> Tokenizer:
        """The tokenizer this config names (`tokembed.get_tokenizer`)."""
        from tokembed.tokenizer import get_tokenizer

        return get_tokenizer(self.tokenizer, pattern=self.pattern, eot=self.eot)
