"""The manifest is checked too: its schema and its seal (``manifest_sha256``). Issue 16, item 5.

Was: 1,399 of 5,403 single-byte changes to manifest.json passed `tokembed check` (a key renamed
``eot_token`` -> ``eot_tokex``, ``train`` -> ``xrain``, counts, names, two shard entries swapped...).
"""

from __future__ import annotations

import json
import random

import pytest

from tokembed.cli import main
from tokembed.shards.check import check_shards, manifest_sealed
from tokembed.shards.prepare import prepare_corpus
from tokembed.shards.reader import open_shards
from tokembed.shards.schema import MANIFEST_HASH


@pytest.fixture(scope="module")
def folder(tmp_path_factory, story, spec_texts):
    root = tmp_path_factory.mktemp("manifest")
    for i, t in enumerate([story, *spec_texts]):
        (root / f"{i}.txt").write_text(t, encoding="utf-8")
    out = root / "out"
    prepare_corpus([root / f"{i}.txt" for i in range(6)], out, workers=1, shard_mb=0.02, val_fraction=0.3)
    assert check_shards(out) == [] and manifest_sealed(out)
    return out


@pytest.fixture
def manifest(folder):
    path = folder / "manifest.json"
    original = path.read_bytes()
    yield path
    path.write_bytes(original)


def test_every_sampled_byte_change_is_caught_or_changes_no_content(folder, manifest):
    original = manifest.read_bytes()
    content = json.loads(original)
    rng = random.Random(0)
    caught = harmless = 0
    for _ in range(400):
        pos = rng.randrange(len(original))
        b = bytearray(original)
        b[pos] = rng.choice([c for c in range(32, 127) if c != b[pos]])
        manifest.write_bytes(bytes(b))
        try:
            same = json.loads(bytes(b)) == content  # the change did not touch the content (e.g. indentation)
        except ValueError:
            same = False
        problems = check_shards(folder)
        assert problems or same, (pos, chr(b[pos]), bytes(b[pos - 40 : pos + 40]))
        caught += bool(problems)
        harmless += same and not problems
    assert caught > 300  # almost every change touches the content


@pytest.mark.parametrize(
    "edit",
    [
        lambda m: m["tokenizer"].update(eot_tokex=m["tokenizer"].pop("eot_token")),
        lambda m: m["splits"].update(xrain=m["splits"].pop("train")),
        lambda m: m["splits"]["train"]["shards"].reverse(),  # reorders the token stream
        lambda m: m["tokenizer"].update(n_vocab=50000),
        lambda m: m["config"].update(shard_mb=-1.0),
        lambda m: m["inputs"][0].update(path=""),
        lambda m: m.update(units="3"),
    ],
    ids=["eot-key", "split-name", "swap-shards", "n_vocab", "config", "input-path", "units"],
)
def test_edits_are_caught_with_and_without_the_seal(folder, manifest, edit):
    m = json.loads(manifest.read_text())
    edit(m)
    manifest.write_text(json.dumps(m, indent=1))
    problems = check_shards(folder)
    assert any("does not match its manifest_sha256" in p for p in problems)
    with pytest.raises(ValueError, match=r"manifest.json is damaged: .*tokembed check"):
        open_shards(folder)  # no KeyError from deep inside: the loader refuses the manifest
    del m[MANIFEST_HASH]  # as an older tokembed wrote it: the schema alone still finds these
    manifest.write_text(json.dumps(m, indent=1))
    assert [p for p in check_shards(folder) if "manifest_sha256" not in p]


def test_a_change_of_layout_only_is_harmless(folder, manifest):
    m = json.loads(manifest.read_text())
    manifest.write_text(json.dumps(dict(reversed(list(m.items()))), indent=4))
    assert check_shards(folder) == []
    assert len(open_shards(folder).shards) == len(m["splits"]["train"]["shards"])


def test_check_says_when_a_manifest_has_no_seal(folder, manifest, capsys):
    assert main(["check", str(folder)]) == 0
    assert "note:" not in capsys.readouterr().err
    m = json.loads(manifest.read_text())
    del m[MANIFEST_HASH]
    manifest.write_text(json.dumps(m))
    assert main(["check", str(folder)]) == 0  # still healthy: folders written before the seal keep working
    err = capsys.readouterr().err
    assert "has no manifest_sha256" in err and "cannot be detected" in err


def test_check_finds_stray_files_beside_the_splits(folder):
    """Was: `check` ignored files in the folder itself (issue 16, item 13)."""
    (folder / "NOTES.txt").write_text("mine")
    try:
        assert check_shards(folder) == ["NOTES.txt: not part of the shard folder (a stray file; move it away)"]
    finally:
        (folder / "NOTES.txt").unlink()


def _reference(manifest):
    """What the manifest file was before `sealed_text`: json's canonical JSON for the seal, `dumps_indented`."""
    import hashlib

    from tokembed._atomic import dumps_indented

    body = {k: v for k, v in manifest.items() if k != MANIFEST_HASH}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    sealed = {**manifest, MANIFEST_HASH: hashlib.sha256(canonical.encode()).hexdigest()}
    return sealed, dumps_indented(sealed) + "\n"


@pytest.mark.parametrize("orjson", [True, False], ids=["orjson", "json"])
def test_sealed_text_is_the_seal_and_the_indented_json_byte_for_byte(folder, orjson, monkeypatch):
    """The token counts written once (spliced into the seal's JSON and, indented, into the file) give the bytes and
    seal that json's own two passes give: for a real manifest, random counts of a large vocabulary in any key order,
    an empty split, odd split names, and manifests the splice must leave to the plain way."""
    import sys

    from tokembed.shards.schema import sealed_text

    if not orjson:
        monkeypatch.setitem(sys.modules, "orjson", None)  # import orjson -> ImportError
    real = {k: v for k, v in json.loads((folder / "manifest.json").read_text()).items() if k != MANIFEST_HASH}
    rnd = random.Random(0)
    ids = rnd.sample(range(200_000), 5_000)
    big = {str(i): rnd.randrange(1, 10**12) for i in ids}  # insertion order random: json sorts the keys
    cases = [
        real,
        {**real, "token_counts": {"train": big, "val": {}}},
        {**real, "token_counts": {'v\u00e4l "x":,': {"1": 2, "10": 3, "2": 1}, "train": {"0": 0}}},
        {**real, "token_counts": {}},
        {**real, "token_counts": {"train": {"1": 2**70}}},  # beyond 64 bits: json writes it
        {**real, "token_counts": {"train": {"a,b": 1}}},  # not ids: the plain way
        {**real, "token_counts": {"train": {"1": 1.5}}},
        {**real, "token_counts": {"train": {"1": True}}},
        {k: v for k, v in real.items() if k != "token_counts"},
        {**real, MANIFEST_HASH: "0" * 64},  # sealed already: sealed again, the plain way
    ]
    for m in cases:
        assert sealed_text(m) == _reference(m)
