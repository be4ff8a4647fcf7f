"""Documents larger than a shard: cut at pre-tokenizer-safe points, streamed, and read back whole.

The references are independent of the code under test: tiktoken applied to the whole document, the
documented validation rule written out here, and plain/gzip/stdin inputs that must agree byte for byte.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tokembed.shards.units as units
from tokembed.data.plan import window_count
from tokembed.data.windows import SlidingWindowDataset
from tokembed.shards.check import check_shards
from tokembed.shards.config import PrepareConfig
from tokembed.shards.prepare import prepare_corpus
from tokembed.shards.reader import open_shards
from tokembed.shards.sources import Span, plan_units, read_span, resolve_inputs, safe_cut
from tokembed.tokenizer import get_tokenizer

ENC = get_tokenizer("gpt2")
EOT = ENC.eot_token
TOKEMBED = [sys.executable, "-m", "tokembed"]


def all_safe_cuts(data: bytes) -> list[int]:
    cuts, i = [], safe_cut(data, 1)
    while i >= 0:
        cuts.append(i)
        i = safe_cut(data, i + 1)
    return cuts


def folder_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def decoded(root: Path, split: str = "train") -> list[str]:
    return [ENC.decode(d.tolist()) for d in open_shards(root, split=split).documents()]


def big_text(story: str, spec_texts: list[str], copies: int) -> str:
    return "\n\n".join([story, *spec_texts] * copies)


# ------------------------------------------------------------------------------------------- the cut rule

# Characters that stress GPT-2's pre-tokenizer: ASCII and Unicode whitespace (NBSP, ideographic space,
# line separator), contractions, digits, punctuation, CJK, emoji with joiners, combining marks.
# Whitespace is drawn half of the time, so runs of it (where a wrong cut would show) are common.
ALPHABET = st.sampled_from(
    [" ", "  ", "\t", "\n", "\n\n", "\r\n", "\x0b", "\x0c", "\u00a0", "\u3000", "\u2028", "\u0085"]
) | st.sampled_from(list("abZ9'sllvedmt.,!?-_\"") + ["日本", "é", "e\u0301", "👩🏽‍💻", "🇫🇷", "ﬁ", "\x07", "\x1c", "₂"])


@settings(max_examples=300)
@given(st.lists(ALPHABET, min_size=1, max_size=80).map("".join))
def test_every_safe_cut_keeps_the_tokens_of_the_whole(text):
    data = text.encode("utf-8")
    whole = ENC.encode_ordinary(text)
    for i in all_safe_cuts(data):
        left, right = data[:i].decode("utf-8"), data[i:].decode("utf-8")
        assert ENC.encode_ordinary(left) + ENC.encode_ordinary(right) == whole, (text, i)


def test_safe_cuts_in_the_chapter_texts(story, spec_texts):
    for text in [story, *spec_texts]:
        data = text.encode("utf-8")
        whole = ENC.encode_ordinary(text)
        cuts = all_safe_cuts(data)
        assert len(cuts) > len(data) // 40  # prose has a cut point every few words, in every language
        for i in cuts[:: max(1, len(cuts) // 25)]:
            assert (
                ENC.encode_ordinary(data[:i].decode("utf-8")) + ENC.encode_ordinary(data[i:].decode("utf-8")) == whole
            )


def test_safe_cut_refuses_places_inside_whitespace_or_characters():
    assert safe_cut(b"ab  cd") == 2  # after "b", before the first space; never between the two spaces
    assert safe_cut(b"ab  cd", 3) == -1
    assert safe_cut("日本 語".encode()) == 6  # after a CJK letter
    assert safe_cut("a\u00a0 b".encode()) == -1  # NBSP is whitespace: no cut after it
    assert safe_cut(b"a\xff b") == -1  # after invalid UTF-8: no cut
    assert safe_cut(b"nospacesatall") == -1


def test_plan_cuts_a_large_text_file_into_bounded_pieces(tmp_path, story):
    p = tmp_path / "big.txt"
    p.write_text(story * 6, encoding="utf-8")
    unit = 5000
    units = list(plan_units(resolve_inputs([p]), unit))
    spans = [sp for spans, _ in units for sp in spans]
    assert len(units) == len(spans) > 20  # every piece fills a unit
    assert [sp.start for sp in spans[1:]] == [sp.end for sp in spans[:-1]] and spans[-1].end == p.stat().st_size
    assert all(unit <= len(sp) < unit + 200 for sp in spans[:-1])  # prose: a cut point within a few bytes
    assert [sp.flags for sp in spans] == [2] + [3] * (len(spans) - 2) + [1]  # MORE, CONT|MORE ..., CONT
    assert sum(d for _, d in units) == p.stat().st_size
    q = tmp_path / "solid.txt"
    q.write_bytes(b"x" * 20000)  # no whitespace at all: it cannot be cut, it stays whole
    assert [(sp.start, sp.end, sp.flags) for spans, _ in plan_units(resolve_inputs([q]), unit) for sp in spans] == [
        (0, 20000, 0)
    ]


# ------------------------------------------------------------------------------------------- through disk


def test_a_text_file_larger_than_a_shard_spans_shards_and_reads_back_whole(tmp_path, story, spec_texts):
    text = big_text(story, spec_texts, 3)  # ~200 KB in five scripts
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "big.txt").write_text(text, encoding="utf-8")
    (tmp_path / "in" / "small.txt").write_text("a small document after it", encoding="utf-8")
    res = prepare_corpus([tmp_path / "in"], tmp_path / "out", workers=1, shard_mb=0.02)
    ss = open_shards(tmp_path / "out", verify=True)
    assert len(ss.shards) >= 10 and res.manifest["version"] == 2
    assert decoded(tmp_path / "out") == [text, "a small document after it"]
    assert ss.read(0, ss.n_tokens).tolist() == ENC.encode_ordinary(text) + [EOT] + ENC.encode_ordinary(
        "a small document after it"
    ) + [EOT]
    assert ss.n_documents == 2 and ss.doc_starts().tolist() == [0, len(ENC.encode_ordinary(text)) + 1]
    assert [ss.index(i).tolist() for i in range(len(ss.shards) - 1)] == [[0]] + [[]] * (
        len(ss.shards) - 2
    )  # it begins in shard 0 only
    big = res.manifest["inputs"][0]
    assert (big["documents"], big["tokens"], big["chars"]) == (1, len(ENC.encode_ordinary(text)), len(text))
    assert check_shards(tmp_path / "out") == []
    # Windows inside documents run across the shard boundaries of the big document.
    ds = SlidingWindowDataset(tmp_path / "out", max_length=64, stride=50, within_documents=True)
    doc = np.array(ENC.encode_ordinary(text) + [EOT])
    assert len(ds) == window_count(len(doc), 64, 50)
    for k in (0, len(ds) // 2, len(ds) - 1):
        x, y = ds[k]
        assert x.tolist() == doc[k * 50 : k * 50 + 64].tolist() and y.tolist() == doc[k * 50 + 1 : k * 50 + 65].tolist()


def test_workers_gzip_and_stdin_cut_a_large_document_identically(tmp_path, story, spec_texts):
    text = big_text(story, spec_texts, 2)
    plain = tmp_path / "big.txt"
    plain.write_text(text, encoding="utf-8")
    (tmp_path / "gz").mkdir()
    (tmp_path / "gz" / "big.txt.gz").write_bytes(gzip.compress(plain.read_bytes()))
    opts = dict(shard_mb=0.015, val_fraction=0.0)
    prepare_corpus([plain], tmp_path / "w1", workers=1, **opts)
    prepare_corpus([plain], tmp_path / "w2", workers=2, **opts)
    prepare_corpus([tmp_path / "gz"], tmp_path / "gzip", workers=1, **opts)
    r = subprocess.run(
        [
            *TOKEMBED,
            "prepare",
            "-",
            "--format",
            "text",
            "--shard-mb",
            "0.015",
            "--out",
            str(tmp_path / "stdin"),
            "--workers",
            "1",
            "-q",
        ],
        input=plain.read_bytes(),
        capture_output=True,
    )
    assert r.returncode == 0, r.stderr.decode()
    ref = folder_bytes(tmp_path / "w1")
    assert len([k for k in ref if k.endswith(".bin")]) > 8
    shards = {k: v for k, v in ref.items() if k != "manifest.json"}
    assert {k: v for k, v in folder_bytes(tmp_path / "w2").items()} == ref
    for other in ("gzip", "stdin"):  # the manifests differ only in the inputs' names and sizes
        assert {k: v for k, v in folder_bytes(tmp_path / other).items() if k != "manifest.json"} == shards


def test_a_cut_document_goes_to_one_split_by_the_documented_rule(tmp_path, monkeypatch):
    # The rule: val when blake2b-64 of the first VAL_KEY_BYTES bytes of the document's UTF-8 text is below
    # f * 2**64. A small key makes the documents long enough to be cut, with a 2-byte character straddling
    # the key's end in some of them (the planner decides cut documents from their raw head bytes).
    key = 300
    monkeypatch.setattr(units, "VAL_KEY_BYTES", key)
    rng = np.random.default_rng(5)
    words = ["alpha", "beta", "gamma", "délta", "ε", "日本", "zeta", "x"]
    docs = []
    for i in range(40):
        body = " ".join(rng.choice(words, size=int(rng.integers(60, 400))))
        docs.append(f"doc {i}: " + body)
    src = tmp_path / "in"
    src.mkdir()
    for i, d in enumerate(docs):
        (src / f"{i:03d}.txt").write_text(d, encoding="utf-8")

    def expected_val(text: str) -> bool:
        h = int.from_bytes(hashlib.blake2b(text.encode("utf-8")[:key], digest_size=8).digest(), "little")
        return h < 0.5 * 2.0**64

    straddling = sum(
        len(d.encode()[: key + 1].decode("utf-8", "ignore").encode()) != len(d.encode()[: key + 1]) for d in docs
    )
    assert straddling > 3  # the key's end falls inside a character in several documents
    want_val = [d for d in docs if expected_val(d)]
    want_train = [d for d in docs if not expected_val(d)]
    assert 8 < len(want_val) < 32
    for shard_mb in (0.0003, 0.001, 8):  # cut into pieces (planner decides), and whole (worker decides)
        out = tmp_path / f"o{shard_mb}"
        prepare_corpus([src], out, workers=1, shard_mb=shard_mb, val_fraction=0.5)
        assert decoded(out, "val") == want_val, shard_mb
        assert decoded(out, "train") == want_train, shard_mb
        assert check_shards(out) == []


# ------------------------------------------------------------------------------------------- spans, errors


@pytest.mark.parametrize("part_bytes", [None, 300])
def test_line_numbers_in_errors_from_later_units_plain_and_gzip(tmp_path, monkeypatch, part_bytes):
    if part_bytes:
        monkeypatch.setattr(units, "PART_BYTES", part_bytes)
    lines = [json.dumps({"text": f"document {i}"}) for i in range(60)]
    lines[56] = '{"text": "broken'
    data = ("\n".join(lines) + "\n").encode()
    (tmp_path / "a.jsonl").write_bytes(data)
    (tmp_path / "b.jsonl.gz").write_bytes(gzip.compress(data))
    offset = len("\n".join(lines[:56])) + 1
    for name in ("a.jsonl", "b.jsonl.gz"):
        with pytest.raises(ValueError, match=rf"{name}, line 57: not valid JSON"):
            prepare_corpus(
                [tmp_path / name], tmp_path / f"o-{name}", workers=1, shard_mb=0.0002 if part_bytes is None else 0.001
            )
    bad = bytearray(data)
    bad[offset + 11] = 0xFF
    (tmp_path / "c.jsonl").write_bytes(bytes(bad))
    with pytest.raises(ValueError, match=rf"c.jsonl, line 57: invalid UTF-8 at byte offset {offset + 11}"):
        prepare_corpus(
            [tmp_path / "c.jsonl"],
            tmp_path / "o-c",
            workers=1,
            shard_mb=0.0002 if part_bytes is None else 0.001,
            strict=True,
        )


def test_a_file_that_shrinks_after_planning_is_a_clear_error(tmp_path):
    p = tmp_path / "t.txt"
    p.write_bytes(b"0123456789")
    with pytest.raises(
        ValueError, match=r"t.txt changed while it was being prepared \(read 10 of 100 bytes at offset 0\); rerun"
    ):
        read_span(Span(0, 0, 100), str(p))
    assert read_span(Span(0, 2, 5), str(p)) == b"234"


# ------------------------------------------------------------------------------------------- parts of units


@pytest.mark.parametrize("val", [0.0, 0.5])
def test_tokenizing_units_in_small_parts_changes_no_byte(tmp_path, story, spec_texts, monkeypatch, val):
    # Units are tokenized in parts (JSON lines, documents, and documents cut at safe points) so that
    # workers share even a few units; put together, the parts must give exactly the unit's shards.
    monkeypatch.setattr(units, "VAL_KEY_BYTES", 300)  # whole documents cut into parts get their split from the head
    src = tmp_path / "in"
    src.mkdir()
    (src / "a-story.txt").write_text(story, encoding="utf-8")
    for i, t in enumerate(spec_texts):
        (src / f"b-spec-{i}.md").write_text(t, encoding="utf-8")
    (src / "c-big.txt").write_text(big_text(story, spec_texts, 1), encoding="utf-8")
    lines = [json.dumps({"text": t[k : k + 900]}) for t in spec_texts for k in range(0, len(t), 900)]
    (src / "d-lines.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    opts = dict(shard_mb=0.03, val_fraction=val)
    prepare_corpus([src], tmp_path / "whole", workers=1, **opts)  # parts of 1 MiB: every unit in one part
    ref = folder_bytes(tmp_path / "whole")
    monkeypatch.setattr(units, "PART_BYTES", 700)
    planned = list(units.iter_units(resolve_inputs([src]), PrepareConfig(**opts)))
    names = {i: f.path for i, f in enumerate(resolve_inputs([src]))}
    assert sum(len(units.unit_parts(u, PrepareConfig(**opts), names)) for u in planned) > 4 * len(planned)
    for workers in (1, 2):
        prepare_corpus([src], tmp_path / f"parts-{workers}", workers=workers, **opts)
        assert folder_bytes(tmp_path / f"parts-{workers}") == ref, workers
    gz = tmp_path / "gz"  # streamed inputs: the parts are cut from bytes that travel with the unit
    gz.mkdir()
    for p in src.iterdir():
        (gz / (p.name + ".gz")).write_bytes(gzip.compress(p.read_bytes()))
    prepare_corpus([gz], tmp_path / "parts-gz", workers=1, **opts)
    assert {k: v for k, v in folder_bytes(tmp_path / "parts-gz").items() if k != "manifest.json"} == {
        k: v for k, v in ref.items() if k != "manifest.json"
    }
    docs = [story, *spec_texts, big_text(story, spec_texts, 1), *[json.loads(x)["text"] for x in lines]]
    got = decoded(tmp_path / "whole", "train") + decoded(tmp_path / "whole", "val")
    assert sorted(got) == sorted(docs)
    if val:

        def expected_val(text: str) -> bool:
            h = int.from_bytes(hashlib.blake2b(text.encode("utf-8")[:300], digest_size=8).digest(), "little")
            return h < val * 2.0**64

        assert decoded(tmp_path / "whole", "val") == [d for d in docs if expected_val(d)]


# cl100k_base and o200k_base glue "\r\n" to the punctuation before them: they cut before spaces and tabs only.
@settings(max_examples=200)
@given(st.lists(ALPHABET, min_size=1, max_size=80).map("".join))
def test_every_space_cut_keeps_the_tokens_of_the_whole_for_cl100k_and_o200k(text):
    from tokembed.shards.sources import CUTS
    from tokembed.tokenizer import document_cut

    data = text.encode("utf-8")
    for name in ("cl100k_base", "o200k_base"):
        enc = get_tokenizer(name)
        cut_at = CUTS[document_cut(enc)]
        whole = enc.encode_ordinary(text)
        i = cut_at(data, 1)
        while i >= 0:
            left, right = data[:i].decode("utf-8"), data[i:].decode("utf-8")
            assert enc.encode_ordinary(left) + enc.encode_ordinary(right) == whole, (name, text, i)
            i = cut_at(data, i + 1)


def test_gpt2s_cut_rule_would_change_o200k_ids():
    # Why the rule depends on the tokenizer: "x.\n" is one o200k pre-token, so a cut before "\n" is wrong.
    enc = get_tokenizer("o200k_base")
    assert safe_cut(b"x.\ny", 1) == 2
    assert enc.encode_ordinary("x.") + enc.encode_ordinary("\ny") != enc.encode_ordinary("x.\ny")


def test_a_large_o200k_document_cut_into_pieces_keeps_its_ids(tmp_path, story, spec_texts):
    enc = get_tokenizer("o200k_base")
    text = big_text(story, spec_texts, 3)
    (tmp_path / "big.txt").write_text(text, encoding="utf-8")
    r = prepare_corpus([tmp_path / "big.txt"], tmp_path / "o", tokenizer="o200k_base", shard_mb=0.02, workers=1)
    shards = open_shards(tmp_path / "o")
    assert r.manifest["dtype"] == "uint32" and len(shards.shards) > 3  # cut into many pieces
    assert shards.read(0, shards.n_tokens).tolist() == enc.encode_ordinary(text) + [enc.eot_token]
