"""Input formats are registered objects: a toy CSV format defined in this file alone (no edit under src/) prepares
folders that `check` passes and that decode back to its rows, in this process and through the CLI, where a package
declares it under the entry point group ``tokembed.input_formats``. Formats read only through an opened input: a
corpus served by a test-registered URL opener (ranged reads and streams from memory) gives the shards of the same
files on disk.

References: the rows as the `csv` module writes them (independent of tokembed), tiktoken applied to each row, and
the local files' shards for the URL inputs.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tokembed.shards.formats as formats
from tokembed.cli import main
from tokembed.shards.check import check_shards
from tokembed.shards.formats import RecordContext, WholeFileFormat
from tokembed.shards.formats.opened import RangedFile, register_opener
from tokembed.shards.prepare import prepare_corpus
from tokembed.shards.reader import open_shards
from tokembed.shards.sources import plan_units, safe_cut
from tokembed.tokenizer import get_tokenizer

ENC = get_tokenizer("gpt2")
TESTS = Path(__file__).resolve().parent


class CsvFormat(WholeFileFormat):
    """CSV with a header row: one document per row, its text in the column named by --field."""

    name = "csv"
    suffixes = (".csv",)
    summary = "CSV with a header row: one document per row of the column --field"
    title = "CSV"

    def documents(self, text: str, records: RecordContext):
        rows = csv.DictReader(io.StringIO(text, newline=""))
        if records.field not in (rows.fieldnames or []):
            raise ValueError(f"{records.where(0)} has no column {records.field!r} (columns: {rows.fieldnames})")
        for row in rows:
            yield row[records.field]


def rows(n: int, seed: int) -> list[str]:
    """Texts that CSV must quote: commas, quotes, newlines inside a value, non-ASCII, an empty value."""
    import random

    rng = random.Random(seed)
    words = ["the", "verdict", 'a "quoted" word', "comma, inside", "line\nbreak", "Ελληνικά", "日本語", "🤖", "x"]
    out = [" ".join(rng.choices(words, k=rng.randint(1, 60))) for _ in range(n)]
    out[5] = ""
    return out


def write_csv(path: Path, texts: list[str]) -> None:
    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "body"])
        w.writerows([i, t] for i, t in enumerate(texts))


def decoded(root: Path, split: str = "train") -> list[str]:
    return [ENC.decode(d.tolist()) for d in open_shards(root, split=split).documents()]


def folder_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def csv_format():
    formats.register_format(CsvFormat)
    yield
    formats.unregister_format("csv")


def test_the_registry_lists_the_built_in_formats_and_finds_them_by_suffix():
    assert formats.format_names()[:3] == ["text", "jsonl", "parquet"]
    assert [c.name for c in formats.registered_codecs()][:2] == ["gzip", "zstd"]
    assert formats.format_for("a/B.MD").name == formats.format_for("x.rst").name == "text"
    assert formats.format_for("x.ndjson").name == "jsonl" and formats.format_for("x.png") is None
    assert formats.codec_for("x.jsonl.zst").name == "zstd" and formats.codec_for("x.jsonl") is None
    with pytest.raises(ValueError, match=r"unknown input format 'csv'; the formats are text, jsonl, parquet"):
        formats.get_format("csv")


def test_registering_checks_names_and_suffixes():
    class Bad(CsvFormat):
        name = "Bad Name"

    class Taken(CsvFormat):
        name = "mine"
        suffixes = (".jsonl",)

    with pytest.raises(ValueError, match=r"input format name 'Bad Name' must be lower-case"):
        formats.register_format(Bad)
    with pytest.raises(ValueError, match=r"suffix '.jsonl' already belongs to format 'jsonl'"):
        formats.register_format(Taken)
    with pytest.raises(TypeError, match=r"takes an InputFormat subclass or instance"):
        formats.register_format(int)  # type: ignore[arg-type]
    assert "mine" not in formats.format_names()


def test_a_format_defined_in_a_test_prepares_checks_and_decodes_back(csv_format, tmp_path):
    texts_a, texts_b = rows(300, seed=1), rows(120, seed=2)
    src = tmp_path / "in"
    src.mkdir()
    write_csv(src / "a.csv", texts_a)
    write_csv(src / "b.csv", texts_b)
    (src / "notes.txt").write_text("a text file beside them", encoding="utf-8")
    res = prepare_corpus([src], tmp_path / "w1", workers=1, shard_mb=0.01, field="body")
    kept = [t for t in texts_a + texts_b if t.strip()]
    assert decoded(tmp_path / "w1") == kept + ["a text file beside them"]
    ss = open_shards(tmp_path / "w1", verify=True)
    assert ss.read(0, ss.n_tokens).tolist() == [
        i for t in kept + ["a text file beside them"] for i in ENC.encode_ordinary(t) + [ENC.eot_token]
    ]
    a, b, _ = res.manifest["inputs"]
    assert (a["format"], a["documents"], a["empty"]) == ("csv", 299, 1) and b["documents"] == 119
    assert res.units >= 2  # a CSV file is one span: units hold whole files
    assert check_shards(tmp_path / "w1") == []
    assert main(["check", str(tmp_path / "w1")]) == 0
    prepare_corpus([src], tmp_path / "w2", workers=2, shard_mb=0.01, field="body")  # the workers find it too
    assert folder_bytes(tmp_path / "w2") == folder_bytes(tmp_path / "w1")


def test_a_registered_format_goes_through_a_codec_and_says_where_it_fails(csv_format, tmp_path):
    texts = rows(200, seed=3)
    write_csv(tmp_path / "plain.csv", texts)
    (tmp_path / "z").mkdir()
    (tmp_path / "z" / "packed.csv.gz").write_bytes(gzip.compress((tmp_path / "plain.csv").read_bytes()))
    prepare_corpus([tmp_path / "plain.csv"], tmp_path / "p", workers=1, field="body", val_fraction=0.3)
    res = prepare_corpus([tmp_path / "z"], tmp_path / "g", workers=1, field="body", val_fraction=0.3)
    assert res.manifest["inputs"][0]["compressed"] is True
    for split in ("train", "val"):
        assert decoded(tmp_path / "p", split) == decoded(tmp_path / "g", split)
    (tmp_path / "rows.data").write_bytes((tmp_path / "plain.csv").read_bytes())
    res = prepare_corpus([tmp_path / "rows.data"], tmp_path / "d", workers=1, field="body", format="csv")
    assert decoded(tmp_path / "d") == [t for t in texts if t.strip()]
    with pytest.raises(ValueError, match=r"plain.csv has no column 'text' \(columns: \['id', 'body'\]\)"):
        prepare_corpus([tmp_path / "plain.csv"], tmp_path / "e", workers=1)


def register_csv() -> None:
    """What a plugin's entry point calls (``module:function``): register this file's CsvFormat."""
    formats.register_format(CsvFormat)


def plugin_env(tmp_path: Path, how: str) -> dict[str, str]:
    """An environment whose ``tokembed`` finds this file's CsvFormat: named in TOKEMBED_PLUGINS, or declared by an
    installed distribution as an entry point of the group ``tokembed.plugins`` (a ``*.dist-info`` folder on
    PYTHONPATH: what ``pip install`` of a package with ``[project.entry-points."tokembed.plugins"]`` leaves)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(TESTS)])}
    env.pop(formats.PLUGINS_ENV, None)
    if how == "env":
        return {**env, formats.PLUGINS_ENV: "test_input_formats:register_csv"}
    if how != "entry-point":
        return env  # no plugin
    info = tmp_path / "site" / "toy_csv_format-1.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-csv-format\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[{formats.ENTRY_POINT_GROUP}]\ncsv = test_input_formats:register_csv\n")
    return env


def tokembed_cli(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tokembed", *args], cwd=tmp_path, env=env, capture_output=True, text=True
    )


@pytest.mark.slow  # four tokembed processes
@pytest.mark.parametrize("how", ["entry-point", "env"])
def test_the_cli_finds_a_format_through_a_plugin(tmp_path, how):
    texts = rows(150, seed=4)
    write_csv(tmp_path / "rows.csv", texts)
    (tmp_path / "rows.data").write_bytes((tmp_path / "rows.csv").read_bytes())
    env = plugin_env(tmp_path, how)
    for args, out in ((["rows.csv"], "by-suffix"), (["rows.data", "--format", "csv"], "by-name")):
        proc = tokembed_cli(tmp_path, env, "prepare", *args, "--out", out, "--field", "body", "--workers", "1", "-q")
        assert proc.returncode == 0, proc.stderr
        assert decoded(tmp_path / out) == [t for t in texts if t.strip()]  # read back without the plugin
        assert check_shards(tmp_path / out) == []
    helped = tokembed_cli(tmp_path, env, "prepare", "--help").stdout
    assert "csv (CSV with a header row" in " ".join(helped.split())
    bare = tokembed_cli(
        tmp_path, plugin_env(tmp_path / "none", "none"), "prepare", "rows.data", "--out", "x", "--format", "csv"
    )
    assert bare.returncode == 2 and "format must be one of auto, text, jsonl, parquet, got 'csv'" in bare.stderr


def test_a_broken_format_plugin_is_named(tmp_path):
    env = {**plugin_env(tmp_path, "none"), formats.PLUGINS_ENV: "no_such_module"}
    (tmp_path / "a.txt").write_text("text", encoding="utf-8")
    broken = tokembed_cli(tmp_path, env, "prepare", "a.txt", "--out", "y")
    assert broken.returncode == 2 and "tokembed plugin 'no_such_module' (from TOKEMBED_PLUGINS)" in broken.stderr


# ---------------------------------------------------------------------------------------- opened inputs


class MemoryInput:
    """An input served from memory with ranged reads and a stream only: what a storage layer implements."""

    seekable = True

    def __init__(self, name: str, data: bytes, reads: list[tuple[int, int]]) -> None:
        self.name, self.data, self.reads = name, data, reads

    @property
    def size(self) -> int:
        return len(self.data)

    def read_at(self, offset: int, n: int) -> bytes:
        self.reads.append((offset, n))
        return self.data[offset : offset + n]

    def stream(self):
        return io.BytesIO(self.data)

    def open_file(self):
        return io.BufferedReader(RangedFile(self))

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def test_inputs_behind_a_url_opener_give_the_shards_of_the_local_files(tmp_path, story, spec_texts, monkeypatch):
    src = tmp_path / "local"
    src.mkdir()
    lines = [json.dumps({"text": t[k : k + 700]}) for t in spec_texts for k in range(0, len(t), 700)]
    (src / "a.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (src / "b.txt.gz").write_bytes(gzip.compress(story.encode()))
    pq.write_table(pa.table({"text": [story[:2000], *spec_texts]}), src / "c.parquet", row_group_size=2)
    (src / "d.txt").write_text(story * 3, encoding="utf-8")  # cut into pieces at safe points
    blobs = {f"mem://bucket/{p.name}": p.read_bytes() for p in src.iterdir()}
    reads: list[tuple[int, int]] = []
    monkeypatch.setattr(formats.opened, "_OPENERS", {})  # (the opener is this test's only)
    register_opener("mem", lambda url: MemoryInput(url, blobs[url], reads))
    opts = dict(workers=1, shard_mb=0.004, val_fraction=0.2)
    prepare_corpus([src], tmp_path / "disk", **opts)
    res = prepare_corpus(sorted(blobs), tmp_path / "url", **opts)
    assert [f["path"] for f in res.manifest["inputs"]] == sorted(blobs)
    assert reads  # the planner and the workers read ranges through the opener
    local = {k: v for k, v in folder_bytes(tmp_path / "disk").items() if k != "manifest.json"}
    assert {k: v for k, v in folder_bytes(tmp_path / "url").items() if k != "manifest.json"} == local
    with pytest.raises(ValueError, match=r"input s3://bucket/x.jsonl is a URL, and no reader for s3:// URLs"):
        prepare_corpus(["s3://bucket/x.jsonl"], tmp_path / "s3")


def test_the_docs_list_the_registered_formats():
    docs = (TESTS.parent / "docs" / "corpora.md").read_text(encoding="utf-8")
    block = docs.split("<!-- formats table: generated from the registry -->\n")[1].split("\n<!-- end of")[0]
    assert block == formats.formats_table(), "paste tokembed.shards.formats.formats_table() into docs/corpora.md"


def test_the_planner_reads_a_seekable_text_only_around_its_cut_points(story, monkeypatch):
    data = (story * 64).encode()  # 1.3 MB
    reads: list[tuple[int, int]] = []
    monkeypatch.setattr(formats.opened, "_OPENERS", {})
    register_opener("mem", lambda url: MemoryInput(url, data, reads))
    big = [formats.InputFile("mem://b/big.txt", "text", False, len(data))]
    spans = [sp for unit, _ in plan_units(big, 200_000, cut_at=safe_cut) for sp in unit]
    assert len(spans) == 7 and sum(n for _, n in reads) < len(data) / 2  # a 64 KiB window per cut
    assert b"".join(data[sp.start : sp.end] for sp in spans) == data
    reads.clear()  # a tokenizer without a cut rule: the document stays whole, and nothing needs reading
    assert [(sp.start, sp.end, sp.flags) for unit, _ in plan_units(big, 200_000, cut_at=None) for sp in unit] == [
        (0, len(data), 0)
    ]
    assert reads == []
