"""Input formats for `tokembed prepare`: each format is one registered object.

The mental model (one page):

- An **input** is a file, standard input or a URL (`remote.RemoteInput`, through `tokembed.storage`), read only
  through an `opened.OpenedInput` (ranged reads, a stream, or a seekable file object): no format opens a path itself.
- A **codec** (gzip ``.gz``, zstd ``.zst``) is a layer around any streamable format, chosen by the last suffix.
- A **format** (`base.InputFormat`) recognises its inputs (``name`` for ``--format``, ``suffixes``), plans them into
  `base.Span` s (main process), reads a span's bytes and turns them into the documents' texts, a batch per span
  (workers), and says where a record is in error messages. Shared rules (UTF-8, binaries, counts) come through
  `base.RecordContext`.

Built in: ``text`` (`text.TextFormat`: text, markdown, reStructuredText), ``jsonl`` (`jsonl.JsonLinesFormat`),
``parquet`` (`parquet.ParquetFormat`); codecs ``gzip`` and ``zstd`` (`codecs`). Bases for new byte formats:
`bytes.LinesFormat` (a record per line), `bytes.WholeFileFormat` (a file parsed whole, e.g. CSV).

Adding a format: a class with ``name``, ``suffixes`` and the methods of its base, registered with
`register_format` (also a class decorator); built in, it is one new module here plus its line in the tuple below.
Outside tokembed, the module that registers it is a plugin (``TOKEMBED_PLUGINS=module``, or an entry point of the
group ``tokembed.plugins``: `tokembed._plugins`), and ``tokembed prepare --format NAME`` finds it. ``--format``,
its help, the error messages and the docs' table take the names from this registry.
"""

from tokembed.shards.formats.base import (
    CONT,
    MORE,
    Codec,
    FilePlan,
    InputFile,
    InputFormat,
    PlanOptions,
    RecordContext,
    Span,
    UnreadableInput,
)
from tokembed.shards.formats.bytes import ByteFormat, LinesFormat, WholeFileFormat
from tokembed.shards.formats.codecs import GzipCodec, ZstdCodec
from tokembed.shards.formats.jsonl import JsonLinesFormat
from tokembed.shards.formats.opened import OpenedInput, is_url, open_input, register_opener
from tokembed.shards.formats.parquet import ParquetFormat
from tokembed.shards.formats.registry import (
    ENTRY_POINT_GROUP,
    PLUGINS_ENV,
    check_inputs,
    codec_for,
    format_for,
    format_names,
    formats,
    formats_table,
    get_format,
    register_codec,
    register_format,
    unregister_format,
)
from tokembed.shards.formats.registry import (
    codecs as registered_codecs,
)
from tokembed.shards.formats.remote import register_remote_openers
from tokembed.shards.formats.text import TextFormat

# The built-in formats, in the order --format and --help list them, and the built-in codecs.
for _format in (TextFormat, JsonLinesFormat, ParquetFormat):
    register_format(_format)
for _codec in (GzipCodec, ZstdCodec):
    register_codec(_codec)
register_remote_openers()  # inputs at URLs (s3://, gs://, hf://, https://, ...): tokembed.storage reads them

__all__ = [
    "CONT",
    "ENTRY_POINT_GROUP",
    "MORE",
    "PLUGINS_ENV",
    "ByteFormat",
    "Codec",
    "GzipCodec",
    "JsonLinesFormat",
    "ParquetFormat",
    "TextFormat",
    "ZstdCodec",
    "FilePlan",
    "InputFile",
    "InputFormat",
    "LinesFormat",
    "OpenedInput",
    "PlanOptions",
    "RecordContext",
    "Span",
    "UnreadableInput",
    "WholeFileFormat",
    "check_inputs",
    "codec_for",
    "format_for",
    "format_names",
    "formats",
    "formats_table",
    "get_format",
    "is_url",
    "open_input",
    "register_codec",
    "register_format",
    "register_opener",
    "registered_codecs",
    "unregister_format",
]
