"""Reading zstd-compressed inputs (``.zst``): the decompressed bytes of every frame, in order.

Large corpora (The Pile, SlimPajama, Dolma's mirrors) ship ``.jsonl.zst`` files, often of many concatenated
frames. zstandard's ``stream_reader`` returns only the first frame unless told otherwise, and a file cut short
(an interrupted download) reads there as a clean end of data: it raises nothing. So this reader drives one
``decompressobj`` per frame and asks it whether its frame ended (``eof``): a file that ends inside a frame
raises `EOFError`, as `gzip` does; ``position`` says how many decompressed bytes came before. A frame made with
a zstd dictionary (``zstd -D``) cannot be read without it: that is said as such (`UnreadableInput`), not as damage.
"""

from __future__ import annotations

import io
from typing import Any, BinaryIO

from tokembed.shards.formats.base import UnreadableInput

__all__ = ["ZstdReader"]

READ = 1 << 16  # compressed bytes read at a time
MAX_WINDOW = 1 << 31  # files made with `zstd --long=31` need a 2 GiB window (the library's default stops at 128 MiB)


class ZstdReader(io.RawIOBase):
    """A read-only stream of the decompressed bytes of a zstd file (all frames; skippable frames skipped).

    Attributes:
        fileobj: the compressed file (its ``tell()`` is how far the input has been read, for progress).
        position: decompressed bytes returned so far.
    """

    def __init__(self, fileobj: BinaryIO):
        import zstandard

        self.fileobj = fileobj
        self._error = zstandard.ZstdError
        self._dctx = zstandard.ZstdDecompressor(max_window_size=MAX_WINDOW)
        self._frame: Any = None  # the decompressobj of the current frame
        self._head = b""  # the current frame's first bytes (its header says which dictionary it needs)
        self._frames = 0  # frames begun so far
        self._out, self._off, self.position = memoryview(b""), 0, 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        while self._off == len(self._out):
            data = self._next_input()
            if data is None:
                return 0
            try:
                self._out, self._off = memoryview(self._frame.decompress(data)), 0
            except self._error as e:
                self._refuse_dictionary_frame()
                raise OSError(f"not zstd data, or damaged: {e}") from None
        n = min(len(b), len(self._out) - self._off)
        b[:n] = self._out[self._off : self._off + n]
        self._off += n
        self.position += n
        return n

    def _next_input(self) -> bytes | None:
        """The next compressed bytes to feed, starting a new frame where the last one ended; None at a clean end."""
        if self._frame is None or self._frame.eof:
            data = (self._frame.unused_data if self._frame is not None else b"") or self.fileobj.read(READ)
            if not data:
                return None  # the input ends between frames
            self._frame = self._dctx.decompressobj()
            self._head, self._frames = data[:18], self._frames + 1  # 18 bytes: the longest frame header
            return data
        data = self.fileobj.read(READ)
        if not data:
            raise EOFError("the zstd data ends inside a frame: the file is truncated")
        self._head += data[: 18 - len(self._head)]
        return data

    def _refuse_dictionary_frame(self) -> None:
        """Raise `UnreadableInput` when the frame that failed names a dictionary in its header."""
        import zstandard

        try:
            dict_id = zstandard.get_frame_parameters(self._head).dict_id
        except self._error:
            return  # not even a frame header: damaged, said by the caller
        if dict_id:
            raise UnreadableInput(
                f"frame {self._frames} (after {self.position:,} decompressed bytes) was compressed with a zstd "
                f"dictionary (id {dict_id}), which tokembed does not have; decompress the file with its dictionary "
                "first (zstd -d -D DICTIONARY FILE) and prepare the result"
            )
