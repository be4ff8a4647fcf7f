"""The built-in codecs: gzip (``.gz``) and zstd (``.zst``), each a layer around any streamable format.

Compression is a layer, not a format: ``x.jsonl.gz``, ``x.txt.zst`` and ``x.csv.gz`` are JSON Lines, text and
a plugin's CSV read through a codec, so N formats and M codecs are N + M classes, not N x M. A compressed
input is read front to back once by the planner (no ranged reads), and its spans carry their bytes.
"""

from __future__ import annotations

import gzip
from typing import BinaryIO

from tokembed.shards.formats.base import Codec

__all__ = ["GzipCodec", "ZstdCodec"]


class GzipCodec(Codec):
    """gzip (``.gz``), members one after another; a truncated file raises EOFError."""

    name = "gzip"
    suffix = ".gz"

    def wrap(self, raw: BinaryIO) -> BinaryIO:
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]  # (a binary stream)


class ZstdCodec(Codec):
    """zstd (``.zst``): every frame, for files of many concatenated frames (`tokembed.shards.zstd.ZstdReader`)."""

    name = "zstd"
    suffix = ".zst"

    def wrap(self, raw: BinaryIO) -> BinaryIO:
        from tokembed.shards.zstd import ZstdReader

        return ZstdReader(raw)  # type: ignore[return-value]  # (a binary stream)
