"""Inputs that are not text, and inputs that hold no documents: refused with what was wrong, exit 2."""

from __future__ import annotations

import codecs
import json
import sys
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tokembed.cli import main
from tokembed.shards.prepare import prepare_corpus


def not_text_bytes(raw: bytes) -> int:
    """Invalid UTF-8 bytes (counted by a decode error handler) plus C0 control bytes other than tab and line
    breaks: the definition the refusal uses, computed another way."""
    invalid = 0

    def count(err: UnicodeDecodeError):
        nonlocal invalid
        invalid += err.end - err.start
        return "", err.end

    codecs.register_error("tokembed-test-count", count)
    raw.decode("utf-8", "tokembed-test-count")
    return invalid + sum(b < 0x20 and b not in b"\t\n\x0b\x0c\r" for b in raw)


@pytest.mark.parametrize(
    "name, make",
    [
        ("program.txt", lambda story: Path(sys.executable).read_bytes()[:200_000]),  # an ELF binary renamed
        ("archive.md", lambda story: zlib.compress(story.encode() * 4)),  # compressed data renamed
        ("utf16.txt", lambda story: story.encode("utf-16-le")),  # valid UTF-8, but every other byte is NUL
    ],
)
def test_a_file_that_is_mostly_not_text_is_refused_with_the_share(tmp_path, story, name, make):
    raw = make(story)
    (tmp_path / name).write_bytes(raw)
    share = not_text_bytes(raw) / len(raw)
    assert share > 0.2
    with pytest.raises(
        ValueError, match=rf"{name}: {share:.0%} of its {len(raw):,} bytes are not text .*convert it to UTF-8"
    ):
        prepare_corpus([tmp_path / name], tmp_path / "o", workers=1)


def test_a_binary_piece_of_a_large_file_names_its_bytes(tmp_path, story):
    raw = story.encode() * 5 + Path(sys.executable).read_bytes()[:300_000]
    (tmp_path / "mixed.txt").write_bytes(raw)
    with pytest.raises(ValueError, match=r"mixed.txt \(bytes [\d,]+-[\d,]+\): \d+% of its"):
        prepare_corpus([tmp_path / "mixed.txt"], tmp_path / "o", workers=1, shard_mb=0.1)


def test_text_in_latin_1_is_still_replaced_and_counted_with_a_warning(tmp_path, spec_texts, capsys):
    french = spec_texts[1]
    raw = french.encode("latin-1", "replace")
    (tmp_path / "fr.txt").write_bytes(raw)
    high = sum(b >= 0x80 for b in raw)  # each accented letter is one invalid sequence in UTF-8
    assert 0 < not_text_bytes(raw) / len(raw) < 0.05
    assert main(["prepare", str(tmp_path / "fr.txt"), "--out", str(tmp_path / "o"), "--workers", "1"]) == 0
    assert (
        f"warning: {high:,} invalid UTF-8 sequences or lone surrogates replaced by U+FFFD ({tmp_path / 'fr.txt'}: {high:,})"
        in capsys.readouterr().err
    )


def test_inputs_without_documents_are_an_error_naming_each(tmp_path, capsys):
    (tmp_path / "a-empty.txt").write_bytes(b"")
    (tmp_path / "b-blank.jsonl").write_text("\n\n  \n")
    (tmp_path / "c-empty-texts.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in ["", " ", "\n"]))
    pq.write_table(pa.table({"text": pa.array([], pa.string())}), tmp_path / "d-no-rows.parquet")
    assert main(["prepare", str(tmp_path), "--out", str(tmp_path / "o"), "--workers", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tokembed prepare: error: the inputs hold no documents to tokenize (")
    for part in ("a-empty.txt: an empty file", "b-blank.jsonl: no documents (blank lines only)",
                 "c-empty-texts.jsonl: 3 empty document(s)", "d-no-rows.parquet: no rows"):  # fmt: skip
        assert part in err
    assert not (tmp_path / "o" / "manifest.json").exists()
    (tmp_path / "e.txt").write_text("one real document")
    assert main(["prepare", str(tmp_path), "--out", str(tmp_path / "o2"), "--workers", "1"]) == 0
    assert "no documents from: " in capsys.readouterr().err  # the others are listed, not fatal
