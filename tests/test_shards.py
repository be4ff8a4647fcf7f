"""The shard format's reader, checker and plan, against folders written by hand in the test (from the format's
definition) and against the book's loader."""

from __future__ import annotations

import hashlib
import json
import pickle
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokembed.data.plan import Plan, plan
from tokembed.data.stats import shard_stats
from tokembed.shards.check import check_shards
from tokembed.shards.reader import ShardSet, open_shards
from tokembed.tokenizer import get_tokenizer, tokenizer_hash

EOT = 50256


def write_folder(
    root: Path, docs_per_shard: list[list[list[int]]], *, split: str = "train", dtype: str = "uint16"
) -> list[list[int]]:
    """Write a shard folder straight from the format's definition (independent of tokembed's writer)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / split).mkdir(exist_ok=True)
    npdt = np.dtype("<u2") if dtype == "uint16" else np.dtype("<u4")
    shards, stream = [], []
    for i, docs in enumerate(docs_per_shard):
        toks, starts = [], []
        for d in docs:
            starts.append(len(toks))
            toks += d + [EOT]
        tb = np.array(toks, dtype=npdt).tobytes()
        ib = np.array(starts, dtype="<i8").tobytes()
        (root / split / f"{i:05d}.bin").write_bytes(tb)
        (root / split / f"{i:05d}.idx").write_bytes(ib)
        shards.append(
            {
                "tokens": f"{split}/{i:05d}.bin",
                "index": f"{split}/{i:05d}.idx",
                "n_tokens": len(toks),
                "n_documents": len(docs),
                "bytes": len(tb),
                "sha256": hashlib.sha256(tb).hexdigest(),
                "index_sha256": hashlib.sha256(ib).hexdigest(),
            }
        )
        stream += toks
    enc = get_tokenizer("gpt2")
    manifest = {
        "format": "tokembed-shards",
        "version": 1,
        "dtype": dtype,
        "tokenizer": {"name": "gpt2", "n_vocab": 50257, "eot_token": EOT, "hash": tokenizer_hash(enc)},
        "splits": {
            split: {"tokens": len(stream), "documents": sum(s["n_documents"] for s in shards), "shards": shards}
        },
        "inputs": [],
        "config": {},
    }
    (root / "manifest.json").write_text(json.dumps(manifest))
    return stream


DOCS = [[[1, 2, 3], [4]], [[5, 6, 7, 8, 9]], [[10], [11, 12], [13, 14, 15]]]


def test_read_api_matches_the_concatenated_stream(tmp_path):
    stream = write_folder(tmp_path, DOCS)
    ss = open_shards(tmp_path)
    assert ss.n_tokens == len(stream) == 21
    assert ss.n_documents == 6
    assert ss.cumulative.tolist() == [0, 6, 12, 21]
    assert ss.dtype == np.dtype("<u2")
    assert [s.n_documents for s in ss.shards] == [2, 1, 3]
    assert ss.doc_starts().tolist() == [0, 4, 6, 12, 14, 17]
    for a in range(len(stream) + 1):
        for b in range(a, len(stream) + 1):
            assert ss.read(a, b).tolist() == stream[a:b]
    assert [d.tolist() for d in ss.documents()] == [d for docs in DOCS for d in docs]
    assert isinstance(ss.tokens(0), np.memmap)


def test_uint32_folders_read_back(tmp_path):
    big = [[[70000, 1], [2**31]]]
    stream = write_folder(tmp_path, big, dtype="uint32")
    ss = open_shards(tmp_path)
    assert ss.dtype == np.dtype("<u4")
    assert ss.read(0, ss.n_tokens).tolist() == stream


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.lists(st.lists(st.integers(0, 50255), max_size=6), min_size=1, max_size=4), min_size=1, max_size=5),
    st.data(),
)
def test_read_any_range_property(tmp_path_factory, shards, data):
    root = tmp_path_factory.mktemp("prop")
    stream = write_folder(root, shards)
    ss = open_shards(root)
    a = data.draw(st.integers(0, len(stream)))
    b = data.draw(st.integers(a, len(stream)))
    assert ss.read(a, b).tolist() == stream[a:b]
    starts = ss.doc_starts()
    assert all(stream[s - 1] == EOT for s in starts[1:])  # every document starts right after a separator
    assert len(starts) == sum(len(d) for d in shards)


def test_pickle_keeps_paths_not_maps(tmp_path):
    write_folder(tmp_path, DOCS)
    ss = open_shards(tmp_path)
    ss.tokens(0), ss.tokens(2), ss.doc_starts()
    blob = pickle.dumps(ss)
    assert b"memmap" not in blob
    ss2 = pickle.loads(blob)
    assert isinstance(ss2, ShardSet) and ss2._maps == {}
    assert ss2.read(3, 15).tolist() == ss.read(3, 15).tolist()


def test_read_errors(tmp_path):
    write_folder(tmp_path, DOCS)
    ss = open_shards(tmp_path)
    with pytest.raises(IndexError, match=r"token range \[20, 23\) is outside split 'train'.*21 tokens"):
        ss.read(20, 23)
    with pytest.raises(IndexError, match="shard 3 does not exist.*3 shards"):
        ss.tokens(3)
    with pytest.raises(ValueError, match="split 'val' is not in .*it has 'train'"):
        open_shards(tmp_path, split="val")


def test_open_errors_name_the_shard_and_point_at_check(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist; create it with `tokembed prepare"):
        open_shards(tmp_path / "nope")
    (tmp_path / "f").write_text("x")
    with pytest.raises(NotADirectoryError, match="is a file, not a shard folder"):
        open_shards(tmp_path / "f")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="manifest.json not found"):
        open_shards(tmp_path / "empty")
    root = tmp_path / "d"
    write_folder(root, DOCS)
    (root / "train" / "00001.bin").unlink()
    with pytest.raises(
        ValueError, match=r"shard train/00001.bin of .* is damaged: train/00001.bin is missing; run `tokembed check"
    ):
        open_shards(root)
    write_folder(root, DOCS)
    with open(root / "train" / "00002.bin", "ab") as f:
        f.write(b"\0\0")
    with pytest.raises(ValueError, match=r"train/00002.bin has 20 bytes, expected 18"):
        open_shards(root)
    write_folder(root, DOCS)
    p = root / "train" / "00000.bin"
    b = bytearray(p.read_bytes())
    b[3] ^= 0x01
    p.write_bytes(bytes(b))
    open_shards(root)  # sizes are right: the cheap open does not read the data
    with pytest.raises(ValueError, match=r"train/00000.bin: sha256 mismatch.*tokembed check"):
        open_shards(root, verify=True)


def test_manifest_version_and_format_errors(tmp_path):
    write_folder(tmp_path, DOCS)
    m = json.loads((tmp_path / "manifest.json").read_text())
    (tmp_path / "manifest.json").write_text(json.dumps({**m, "version": 99}))
    with pytest.raises(
        ValueError, match="shard format version 99; this tokembed reads versions 1, 2: upgrade tokembed"
    ):
        open_shards(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({**m, "format": "other"}))
    with pytest.raises(ValueError, match="is not a tokembed shard manifest"):
        open_shards(tmp_path)
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(ValueError, match="is not valid JSON"):
        open_shards(tmp_path)


def test_check_is_empty_on_a_healthy_hand_written_folder(tmp_path):
    write_folder(tmp_path, DOCS)
    assert check_shards(tmp_path) == []


def test_check_finds_a_flipped_byte_anywhere(tmp_path):
    write_folder(tmp_path, DOCS)
    rng = np.random.default_rng(0)
    files = sorted((tmp_path / "train").iterdir())
    for p in files:
        original = p.read_bytes()
        for pos in rng.choice(len(original), size=min(4, len(original)), replace=False):
            b = bytearray(original)
            b[pos] ^= 1 << int(rng.integers(8))
            p.write_bytes(bytes(b))
            problems = check_shards(tmp_path)
            assert any(p.name in msg and "sha256 mismatch" in msg for msg in problems), (p, pos, problems)
        p.write_bytes(original)
    assert check_shards(tmp_path) == []


def test_check_finds_bad_structure_even_with_matching_checksums(tmp_path):
    # A document without its separator, checksums recomputed: only the structural check can see it.
    write_folder(tmp_path, [[[1, 2, 3]]])
    m = json.loads((tmp_path / "manifest.json").read_text())
    tb = np.array([1, 2, 3, 4], dtype="<u2").tobytes()
    (tmp_path / "train" / "00000.bin").write_bytes(tb)
    m["splits"]["train"]["shards"][0]["sha256"] = hashlib.sha256(tb).hexdigest()
    (tmp_path / "manifest.json").write_text(json.dumps(m))
    assert any("its last shard ends inside a document" in p for p in check_shards(tmp_path))
    tb = np.array([1, EOT, 3, EOT], dtype="<u2").tobytes()  # a separator where the index lists no start
    (tmp_path / "train" / "00000.bin").write_bytes(tb)
    m["splits"]["train"]["shards"][0]["sha256"] = hashlib.sha256(tb).hexdigest()
    (tmp_path / "manifest.json").write_text(json.dumps(m))
    assert any(
        "00000.bin: its <|endoftext|> tokens (50256) are not exactly where the index says documents end" in p
        for p in check_shards(tmp_path)
    )
    m["splits"]["train"]["documents"] = 7
    (tmp_path / "manifest.json").write_text(json.dumps(m))
    assert any("total of 7 documents differs" in p for p in check_shards(tmp_path))
    (tmp_path / "train" / "99999.bin").write_bytes(b"")
    assert any("train/99999.bin: not listed in the manifest" in p for p in check_shards(tmp_path))


def reference_windows(n, L, s):
    # The chapter's loop: for i in range(0, len(token_ids) - max_length, stride)
    return sum(1 for _ in range(0, n - L, s))


@given(st.integers(0, 5000), st.integers(1, 300), st.integers(1, 300), st.integers(1, 40))
def test_plan_matches_the_chapter_loop(n, L, s, b):
    p = plan(n, max_length=L, stride=s, batch_size=b)
    w = reference_windows(n, L, s)
    assert p.windows == w
    assert p.batches == w // b and p.dropped_windows == w % b
    if w:
        last_target_end = (w - 1) * s + L + 1  # exclusive end of the last window's targets
        assert p.tail_tokens == n - last_target_end >= 0
    keep = plan(n, max_length=L, stride=s, batch_size=b, drop_last=False)
    assert keep.batches == -(-w // b) and keep.dropped_windows == 0


def test_plan_agrees_with_the_book_loader(story):
    from book_reference import book_create_dataloader_v1

    enc = get_tokenizer("gpt2")
    n = len(enc.encode(story))
    for L, s, b in [(4, 4, 8), (256, 128, 4), (100, 7, 3)]:
        loader = book_create_dataloader_v1(story, batch_size=b, max_length=L, stride=s, shuffle=False)
        p = plan(n, max_length=L, stride=s, batch_size=b)
        assert (p.windows, p.batches) == (len(loader.dataset), len(loader))
    assert plan(n, max_length=4, stride=4, batch_size=8).windows == 1286  # 5145 tokens: the chapter's story


def test_plan_errors():
    with pytest.raises(ValueError, match="stride must be an integer >= 1, got 0"):
        plan(10, max_length=4, stride=0, batch_size=1)
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1, got 2.5"):
        plan(10, max_length=4, stride=1, batch_size=2.5)
    assert isinstance(plan(0, max_length=4, stride=1, batch_size=1), Plan)


def test_shard_stats_on_hand_written_folder(tmp_path):
    write_folder(tmp_path, DOCS)
    st_ = shard_stats(tmp_path, max_length=4, stride=2, batch_size=2)
    tr = st_["splits"]["train"]
    assert (tr["documents"], tr["tokens"], tr["shards"]) == (6, 21, 3)
    assert tr["plan"]["windows"] == reference_windows(21, 4, 2) == 9
    assert tr["plan"]["batches"] == 4 and tr["plan"]["dropped_windows"] == 1


# ------------------------------------------------------------------------------------------- version 2: documents across shards


@settings(max_examples=40, deadline=None)
@given(lengths=st.lists(st.integers(1, 30), min_size=1, max_size=8), data=st.data())
def test_documents_that_span_shards_read_back_whole(tmp_path_factory, lengths, data):
    from handmade_shards import write_cut_stream

    root = tmp_path_factory.mktemp("cut")
    docs = [list(range(100 * i + 1, 100 * i + 1 + n)) for i, n in enumerate(lengths)]
    total = sum(lengths) + len(lengths)
    cuts = sorted(data.draw(st.sets(st.integers(1, total - 1), max_size=6)) if total > 1 else [])
    stream, starts = write_cut_stream(root, docs, cuts)
    ss = open_shards(root, verify=True)
    assert [d.tolist() for d in ss.documents()] == docs
    assert ss.doc_starts().tolist() == starts.tolist()
    assert ss.read(0, ss.n_tokens).tolist() == stream.tolist()
    assert ss.n_documents == len(docs)
    assert check_shards(root) == []


def test_check_finds_a_missing_shard_inside_a_document(tmp_path):
    from handmade_shards import write_cut_stream

    write_cut_stream(tmp_path, [[1, 2, 3, 4, 5, 6], [7, 8]], [2, 4, 8])  # shards: [1 2] [3 4] [5 6 EOT 7] [8 EOT]
    m = json.loads((tmp_path / "manifest.json").read_text())
    assert check_shards(tmp_path) == []
    shards = m["splits"]["train"]["shards"]

    def without(k):
        kept = [s for i, s in enumerate(shards) if i != k]
        mm = {
            **m,
            "splits": {
                "train": {
                    "tokens": sum(s["n_tokens"] for s in kept),
                    "documents": sum(s["n_documents"] for s in kept),
                    "shards": kept,
                }
            },
        }
        (tmp_path / "manifest.json").write_text(json.dumps(mm))
        return [p for p in check_shards(tmp_path) if "not listed in the manifest" not in p]

    assert without(0) == [
        "train/00001.bin: is the split's first shard but begins inside a document (is a shard missing?)"
    ]
    assert (
        without(1) == []
    )  # [1 2] then [5 6 EOT 7]: a cut inside a document looks like any other (sha256 is per shard)
    assert without(3) == [
        "split 'train': its last shard ends inside a document (no <|endoftext|>); a shard is missing at the end"
    ]
    root = tmp_path / "b"
    write_cut_stream(root, [[1, 2], [3, 4]], [3])  # [1 2 EOT] [3 4 EOT]
    m = json.loads((root / "manifest.json").read_text())
    second = m["splits"]["train"]["shards"][1]
    second["n_documents"], second["index_sha256"] = 0, hashlib.sha256(b"").hexdigest()
    (root / "train" / "00001.idx").write_bytes(b"")
    (root / "manifest.json").write_text(
        json.dumps({**m, "splits": {"train": {**m["splits"]["train"], "documents": 1}}})
    )
    assert check_shards(root) == [
        "train/00001.bin: begins inside a document, but the shard before it ends with <|endoftext|> (is a shard missing?)"
    ]
