"""Corpus inputs: which files, in which order, and how they are cut into spans of work for the workers.

Inputs are files, folders (searched recursively), glob patterns, or ``-`` (standard input). What a file is comes
from the registered input formats and codecs (`tokembed.shards.formats`): by its suffix (a codec's last:
``x.jsonl.zst``), or by ``--format`` for a file named explicitly with another suffix (and for standard input).
Built in: plain text and markdown (one document per file), JSON Lines (one per line), gzip and zstd around
either, and Parquet (one per row).

The list is de-duplicated and sorted, so the same inputs always give the same documents in the same order.
`plan_units` has each input's format cut it into `Span` s and groups them into work units. A plain file is only
read around the cut points (the workers read the spans themselves); a stream (gzip, zstd, stdin) is read through
once and each span carries its bytes. Decoding, parsing and tokenizing happen in the workers.

A text document larger than a unit is cut into pieces at **pre-tokenizer-safe points**: just before an
ASCII whitespace byte that follows a non-whitespace character. GPT-2's pre-tokenizer never joins a
non-whitespace character and the whitespace after it into one pre-token, and it matches from such a
point the same way whether or not text precedes it, so the pieces' token ids, concatenated, are exactly
the ids of the whole document (a test checks this on random text). A document with no such point
(no whitespace at all) stays whole.
"""

from __future__ import annotations

import glob
import os
import re
import unicodedata
from collections.abc import Iterator, Sequence

from tokembed.shards.formats.base import CONT, MORE, STDIN, InputFile, PlanOptions, Span, UnreadableInput
from tokembed.shards.formats.opened import is_url, open_input
from tokembed.shards.formats.registry import codec_for, codecs, format_for, format_names, formats, get_format
from tokembed.shards.formats.remote import expand_url, storage_reads

__all__ = [
    "CONT",
    "CUTS",
    "MORE",
    "InputFile",
    "Span",
    "check_format_name",
    "find_inputs",
    "known_suffixes",
    "never_cut",
    "plan_units",
    "read_span",
    "resolve_inputs",
    "safe_cut",
    "safe_space_cut",
]


def known_suffixes() -> str:
    """The suffixes that make a file an input, for messages: ``.txt ... .ndjson (optionally .gz or .zst), .parquet``."""
    streams = " ".join(s for f in formats() if f.streamable for s in f.suffixes)
    others = " ".join(s for f in formats() if not f.streamable for s in f.suffixes)
    optional = " or ".join(c.suffix for c in codecs())
    return streams + (f" (optionally {optional})" if optional else "") + (f", {others}" if others else "")


def _format_of(path: str, forced: str) -> tuple[str, bool] | None:
    """``(format name, compressed)`` of ``path`` by its suffixes (a codec's last), else by ``forced`` (``--format``);
    None when neither says. A format that is not streamable (Parquet) is never read through a codec."""
    codec = codec_for(path)
    fmt = format_for(path[: -len(codec.suffix)] if codec else path)
    if fmt is not None and (codec is None or fmt.streamable):
        return fmt.name, codec is not None
    if forced != "auto" and (codec is None or get_format(forced).streamable):
        return forced, codec is not None
    return None


def resolve_inputs(inputs: Sequence[str | os.PathLike], *, format: str = "auto") -> list[InputFile]:
    """Expand files, folders and globs into a sorted, de-duplicated list of `InputFile` (see `find_inputs`)."""
    return find_inputs(inputs, format=format)[0]


def find_inputs(
    inputs: Sequence[str | os.PathLike] | str | os.PathLike, *, format: str = "auto"
) -> tuple[list[InputFile], list[str]]:
    """Expand files, folders and globs into a sorted list of `InputFile`, each real file at most once.

    Folders are searched recursively for the known suffixes (hidden files and folders are skipped);
    a symlinked folder is followed unless its real folder was searched already (a loop, or a second
    route to the same place). A file reached under several names (named twice, through a symlink) is
    read once, under its first name in sorted order. A file named explicitly with an unknown suffix
    needs ``format`` (``"text"``, ``"jsonl"`` or ``"parquet"``).

    Returns:
        ``(files, skipped)``: the inputs, and one line per path left out as a repeat, saying why.

    Raises:
        ValueError: no inputs, an unknown format, a folder or glob without any input file, ``-`` mixed
            with other inputs.
        FileNotFoundError: a path that does not exist.
        PermissionError: a file that cannot be read.
    """
    check_format_name(format)
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    items: list[str] = [os.fspath(p) for p in inputs]  # (str paths: bytes paths are refused)
    if not items:
        raise ValueError("no inputs: give files, folders, glob patterns, or - for standard input")
    if STDIN in items:
        if len(items) > 1:
            raise ValueError(
                "- (standard input) must be the only input; got also " + ", ".join(p for p in items if p != STDIN)
            )
        return [InputFile(STDIN, "text" if format == "auto" else format, False, None)], []
    found = _Found(format)
    for item in items:
        if is_url(item):
            found.add_urls(item)
        elif os.path.isdir(item):
            if sum(found.add(path, explicit=False) for path in _walk(item, found.skipped)) == 0:
                raise ValueError(f"folder {item} holds no input files ({known_suffixes()})")
        elif os.path.isfile(item):
            found.add(item, explicit=True)
        elif glob.has_magic(item):
            matches = sorted(m for m in glob.glob(item, recursive=True) if os.path.isfile(m))
            if not matches:
                raise ValueError(f"glob {item!r} matches no file")
            for m in matches:
                found.add(m, explicit=True)
        elif os.path.exists(item):
            raise ValueError(f"{item} is neither a file nor a folder")
        else:
            raise FileNotFoundError(f"input {item} does not exist")
    return found.files()


def check_format_name(format: str) -> None:
    """Raise ValueError unless ``format`` is ``"auto"`` or a registered format's name (the message lists them)."""
    names = format_names()
    if format != "auto" and format not in names:
        raise ValueError(f"format must be one of {', '.join(['auto', *names])}, got {format!r}")


def _utf8_name(path: str) -> None:
    """Refuse a file name that is not valid UTF-8 (the manifest records names as UTF-8 text), naming its bytes."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(
            f"input file name {os.fsencode(path)!r} is not valid UTF-8 (tokembed records input names in the manifest "
            "as UTF-8 text); rename the file, e.g. with convmv -f latin1 -t utf-8 --notest, or leave it out"
        ) from None


class _Found:
    """The input files found so far, one per real file (by device and inode), or per URL."""

    def __init__(self, format: str):
        self.format = format
        self.by_real: dict[tuple[int, int] | str, InputFile] = {}
        self.skipped: list[str] = []

    def _format(self, path: str, explicit: bool) -> tuple[str, bool] | None:
        fmt = _format_of(path, self.format if explicit else "auto")
        if fmt is None and explicit:
            raise ValueError(
                f"{path}: unknown file type; name it {known_suffixes()} or pass --format {'|'.join(format_names())}"
            )
        return fmt

    def add(self, path: str, explicit: bool) -> bool:
        """Take ``path`` if it has an input format; True when it is (or repeats) an input."""
        fmt = self._format(path, explicit)
        if fmt is None:
            return False
        _utf8_name(path)
        if not os.access(path, os.R_OK):
            raise PermissionError(f"{path} cannot be read (permission denied); fix its permissions or leave it out")
        st = os.stat(path)
        key, new = (st.st_dev, st.st_ino), InputFile(os.path.normpath(path), fmt[0], fmt[1], st.st_size, st.st_mtime_ns)
        old = self.by_real.get(key)
        if old is None:
            self.by_real[key] = new
        elif old.path != new.path:
            first, second = sorted((old, new), key=lambda f: f.path)
            self.by_real[key] = first
            self.skipped.append(f"{second.path} (the same file as {first.path})")
        return True

    def add_url(self, url: str, explicit: bool = True) -> bool:
        """Take one object named by its URL (through the opener registered for its scheme; an error without one)."""
        if not explicit and self._format(url, explicit=False) is None:
            return False  # an object of a prefix or glob without an input format (no request made for it)
        with open_input(url) as src:  # first: a URL no reader handles is named as such, whatever its suffix
            fmt = self._format(url, explicit=explicit)
            if fmt is None:
                return False  # (not reached: an explicit input of unknown type raised)
            mtime = getattr(src, "mtime_ns", None)  # a rerun sees an object replaced in place (as a local file)
            self.by_real.setdefault(url, InputFile(url, fmt[0], fmt[1], src.size, mtime))
        return True

    def add_urls(self, url: str) -> None:
        """An object's URL, a prefix (its objects, like a folder's files) or a glob of URLs (`expand_url`); a URL
        of a scheme another opener reads (`register_opener`) names one object."""
        if not storage_reads(url):
            self.add_url(url)  # (an error naming the scheme when no opener reads it)
            return
        urls, named = expand_url(url)
        if named:
            self.add_url(urls[0])
        elif not urls:
            raise FileNotFoundError(f"input {url} does not exist (no object and no objects under that prefix)")
        elif sum(self.add_url(u, explicit=False) for u in urls) == 0:
            raise ValueError(f"{url} holds no input files ({known_suffixes()})")

    def files(self) -> tuple[list[InputFile], list[str]]:
        return sorted(self.by_real.values(), key=lambda f: f.path), sorted(set(self.skipped))


def _walk(folder: str, skipped: list[str]) -> Iterator[str]:
    """The files under ``folder``. Real subfolders are searched first, then the symlinked ones whose real
    folder was not searched yet (each real folder once: no loop, no second route); hidden names are skipped."""
    seen: set[tuple[int, int]] = set()
    links = [folder]
    while links:
        for dirpath, dirnames, filenames in os.walk(links.pop(0)):  # does not descend into symlinked folders
            st = os.stat(dirpath)
            if (st.st_dev, st.st_ino) in seen:
                skipped.append(f"{dirpath} (a link to {os.path.realpath(dirpath)}, which was already searched)")
                dirnames[:] = []
                continue
            seen.add((st.st_dev, st.st_ino))
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            links += [os.path.join(dirpath, d) for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
            for f in sorted(filenames):
                if not f.startswith(".") and os.path.isfile(os.path.join(dirpath, f)):
                    yield os.path.join(dirpath, f)


# ASCII whitespace after an ASCII byte that is neither whitespace nor control (always a cut), or after a
# non-ASCII byte (`_non_ascii_non_space_before` decides). Runs of whitespace are skipped in C.
_CANDIDATE = re.compile(rb"(?<=[\x21-\x7e\x80-\xff])[\t\n\x0b\x0c\r ]")


def _non_ascii_non_space_before(w: bytes, i: int) -> bool:
    """Whether the non-ASCII character that ends just before ``w[i]`` is certainly not whitespace. Looks
    back at most 4 bytes (one UTF-8 character), so the answer depends only on the input, not on the window."""
    j = i - 1
    while j > max(0, i - 4) and 0x80 <= w[j] <= 0xBF:  # back to the lead byte
        j -= 1
    try:
        ch = w[j:i].decode("utf-8")
    except UnicodeDecodeError:
        return False  # invalid or cut UTF-8: not a place to cut
    # Letters, marks, numbers, punctuation and symbols are never Unicode White_Space (the regex's \s).
    return len(ch) == 1 and unicodedata.category(ch)[0] in "LMNPS"


def safe_cut(w: bytes, lo: int = 1) -> int:
    """The first index ``i >= lo`` where ``w`` may be cut for GPT-2-style tokenizers, or -1.

    ``w[i]`` is ASCII whitespace and the character before it is not whitespace, so
    ``encode(w[:i]) + encode(w[i:]) == encode(w)`` (see the module docstring)."""
    for m in _CANDIDATE.finditer(w, max(lo, 1)):
        if w[m.start() - 1] < 0x80 or _non_ascii_non_space_before(w, m.start()):
            return m.start()
    return -1


_SPACE_CANDIDATE = re.compile(rb"(?<=[\x21-\x7e\x80-\xff])[\t ]")


def safe_space_cut(w: bytes, lo: int = 1) -> int:
    """Like `safe_cut`, but only before a space or tab: safe for cl100k_base and o200k_base too, whose
    patterns glue newlines to the punctuation before them (``".\n"`` is one pre-token)."""
    for m in _SPACE_CANDIDATE.finditer(w, max(lo, 1)):
        if w[m.start() - 1] < 0x80 or _non_ascii_non_space_before(w, m.start()):
            return m.start()
    return -1


def never_cut(w: bytes, lo: int = 1) -> int:
    """No safe point is known for the tokenizer: documents stay whole."""
    return -1


# A tokenizer's rule for cutting a large document (`tokembed.tokenizer.document_cut`) -> where to cut.
CUTS = {"whitespace": safe_cut, "space": safe_space_cut, None: never_cut}


def plan_units(
    files: Sequence[InputFile],
    unit_bytes: int,
    *,
    carry: bool = False,
    keep: bool = False,
    head_bytes: int = 0,
    cut_at=safe_cut,
    field: str = "text",
) -> Iterator[tuple[list[Span], int]]:
    """Cut the inputs, in order, into work units of at least ``unit_bytes`` bytes (the last may be smaller).

    Each input is planned by its format (`tokembed.shards.formats.InputFormat.open_plan`): a unit ends at the end
    of the JSON line, text document, document piece, row group or rows that fill it. The cuts depend only on the
    input bytes and ``unit_bytes``.

    Args:
        files: the inputs, from `resolve_inputs`.
        unit_bytes: bytes of input per unit.
        carry: read every span's bytes here (for workers without access to the files); streams always do.
        keep: spans keep the bytes read here anyway (for a worker in this process; see `PlanOptions.keep`).
        head_bytes: give the first piece of each cut document its first ``head_bytes`` bytes (`Span.head`).
        cut_at: where a document may be cut (one of `CUTS`: the tokenizer's rule; None: nowhere).
        field: the JSON field / Parquet column holding the text.

    Yields:
        ``(spans, disk_bytes)``: the unit's spans, and the bytes read from disk up to its end (compressed
        bytes for gzip and zstd), for progress.
    """
    options = PlanOptions(unit_bytes, carry=carry, keep=keep, head_bytes=head_bytes, cut_at=cut_at, field=field)
    unit: list[Span] = []
    size, done_files, marked = 0, 0, 0

    def filled() -> int:
        return size  # bytes the unit being filled holds so far

    for fi, f in enumerate(files):
        plan = get_format(f.format).open_plan(f, fi, options)
        try:
            for span in plan.spans(filled):
                unit.append(span)
                size += len(span)
                if size >= unit_bytes:
                    disk = done_files + plan.disk_position(span.end)
                    yield unit, disk - marked
                    unit, size, marked = [], 0, disk
            done_files += plan.disk_bytes()
        except (OSError, EOFError, UnreadableInput) as e:
            raise ValueError(plan.unreadable(e)) from None
        finally:
            plan.close()
    if unit:
        yield unit, max(0, done_files - marked)


def read_span(span: Span, name: str) -> bytes:
    """The bytes of ``span`` of input ``name``, as its format reads them (its data, or from the input).

    Raises:
        ValueError: the input no longer holds those bytes (it changed or shrank since it was planned).
    """
    return get_format(span.format).read(span, name)
