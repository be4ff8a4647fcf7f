"""zstd-compressed inputs (``.jsonl.zst``, ``.txt.zst``), written here with `zstandard`: single and multi-frame
files give the shards of the uncompressed files; truncated and damaged files are clear errors."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import zstandard

from tokembed.shards.prepare import prepare_corpus
from tokembed.shards.reader import open_shards
from tokembed.shards.zstd import ZstdReader
from tokembed.tokenizer import get_tokenizer

ENC = get_tokenizer("gpt2")


def folder_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def decoded(root: Path, split: str = "train") -> list[str]:
    return [ENC.decode(d.tolist()) for d in open_shards(root, split=split).documents()]


def compress(data: bytes, *, frame_bytes: int | None = None) -> bytes:
    """One zstd frame, or (``frame_bytes``) concatenated frames of that much input each, as big corpora ship."""
    c = zstandard.ZstdCompressor(level=3)
    if frame_bytes is None:
        return c.compress(data)
    return b"".join(c.compress(data[i : i + frame_bytes]) for i in range(0, len(data), frame_bytes))


@pytest.fixture(scope="module")
def plain(tmp_path_factory, story, spec_texts):
    """JSON Lines of 1,500 documents and the story as text, uncompressed."""
    d = tmp_path_factory.mktemp("plain")
    docs = [f"{i}: {spec_texts[i % 5][(i * 37) % 3000 :][:400]}" for i in range(1500)]
    with open(d / "docs.jsonl", "w", encoding="utf-8") as f:
        for t in docs:
            f.write(json.dumps({"text": t}) + "\n")
    (d / "story.txt").write_text(story, encoding="utf-8")
    return d, docs + [story]


@pytest.mark.parametrize("frame_bytes", [None, 4096], ids=["one-frame", "multi-frame"])
def test_zst_gives_the_shards_of_the_uncompressed_files(plain, tmp_path, frame_bytes):
    src, docs = plain
    zst = tmp_path / "zst"
    zst.mkdir()
    for p in src.iterdir():
        (zst / (p.name + ".zst")).write_bytes(compress(p.read_bytes(), frame_bytes=frame_bytes))
    prepare_corpus([src], tmp_path / "plain", workers=1, shard_mb=0.02, val_fraction=0.2)
    res = prepare_corpus([zst], tmp_path / "w1", workers=1, shard_mb=0.02, val_fraction=0.2)
    assert res.units > 10
    assert [(f["format"], f["compressed"]) for f in res.manifest["inputs"]] == [("jsonl", True), ("text", True)]
    for split in ("train", "val"):
        a, b = open_shards(tmp_path / "plain", split=split), open_shards(tmp_path / "w1", split=split)
        assert a.read(0, a.n_tokens).tolist() == b.read(0, b.n_tokens).tolist()
    assert sorted(decoded(tmp_path / "w1") + decoded(tmp_path / "w1", "val")) == sorted(docs)
    prepare_corpus([zst], tmp_path / "w2", workers=2, shard_mb=0.02, val_fraction=0.2)
    assert folder_bytes(tmp_path / "w1") == folder_bytes(tmp_path / "w2")


def test_line_numbers_in_errors_count_across_frames(tmp_path):
    lines = [json.dumps({"text": f"document {i}"}) for i in range(3000)]
    lines[2345] = '{"text": "broken'
    data = ("\n".join(lines) + "\n").encode()
    (tmp_path / "bad.jsonl.zst").write_bytes(compress(data, frame_bytes=5000))
    with pytest.raises(ValueError, match=r"bad.jsonl.zst, line 2346: not valid JSON"):
        prepare_corpus([tmp_path / "bad.jsonl.zst"], tmp_path / "o", workers=1, shard_mb=0.01)


def test_a_truncated_zst_names_the_file_and_how_far_and_keeps_the_finished_units(tmp_path):
    data = "".join(json.dumps({"text": f"document number {i} " * 5}) + "\n" for i in range(20_000)).encode()
    blob = compress(data, frame_bytes=50_000)
    (tmp_path / "cut.jsonl.zst").write_bytes(blob[: len(blob) * 3 // 4])  # an interrupted download
    with pytest.raises(
        ValueError,
        match=r"cut.jsonl.zst: cannot be read after [\d,]+ bytes \(decompressed\) \(the zstd data ends inside a frame: the file is truncated\); .*truncated or not zstd .*finished before it are kept",
    ):
        prepare_corpus([tmp_path / "cut.jsonl.zst"], tmp_path / "o", workers=1, shard_mb=0.1)
    assert len(list((tmp_path / "o" / ".parts").glob("0*.json"))) >= 5  # the units read before the cut are done
    (tmp_path / "junk.txt.zst").write_bytes(b"this is not zstd data at all " * 10)
    with pytest.raises(ValueError, match=r"junk.txt.zst: cannot be read after 0 bytes .*not zstd data, or damaged"):
        prepare_corpus([tmp_path / "junk.txt.zst"], tmp_path / "o2", workers=1)


@pytest.mark.parametrize("frame_bytes", [None, 1000])
def test_reader_against_zstandards_one_shot_decompression(frame_bytes):
    data = bytes(range(256)) * 2000
    blob = compress(data, frame_bytes=frame_bytes)
    skippable = b"\x50\x2a\x4d\x18" + (3).to_bytes(4, "little") + b"abc"  # a frame that carries no data
    blob = skippable + blob + skippable
    expected = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(blob), read_across_frames=True).read()
    assert ZstdReader(io.BytesIO(blob)).read() == expected == data
    assert ZstdReader(io.BytesIO(b"")).read() == b""


def test_zstandards_stream_reader_does_not_notice_truncation():
    """Why `ZstdReader` exists: the library's stream reader returns a cut file's bytes without an error."""
    data = b"".join(b"line %d\n" % i for i in range(100_000))
    blob = compress(data)
    cut = blob[: len(blob) // 2]
    assert (
        0 < len(zstandard.ZstdDecompressor().stream_reader(io.BytesIO(cut), read_across_frames=True).read()) < len(data)
    )
    with pytest.raises(EOFError, match="ends inside a frame"):
        ZstdReader(io.BytesIO(cut)).read()
