"""The Ray engine: the same units as Ray tasks on a local Ray, the same bytes as the local engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tokembed.shards.units as units
from tokembed.shards.prepare import prepare_corpus

# Every test here starts a local Ray (seconds): `make test-fast` leaves them out, and collecting them imports no Ray.
pytestmark = pytest.mark.slow


def folder_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_ray_engine_gives_the_same_bytes_and_the_same_errors(local_ray, tmp_path, story, spec_texts, monkeypatch):
    src = tmp_path / "src"
    src.mkdir()
    (src / "story.txt").write_text(story, encoding="utf-8")
    with open(src / "docs.jsonl", "w", encoding="utf-8") as f:
        for i, t in enumerate(spec_texts * 4):
            f.write(json.dumps({"text": f"{i}: {t}"}) + "\n")
    prepare_corpus([src], tmp_path / "local", workers=1, shard_mb=0.02, val_fraction=0.2)
    res = prepare_corpus([src], tmp_path / "ray", engine="ray", shard_mb=0.02, val_fraction=0.2)
    assert res.units >= 5 and res.units_done == res.units
    assert folder_bytes(tmp_path / "local") == folder_bytes(tmp_path / "ray")
    monkeypatch.setattr(units, "PART_BYTES", 700)  # the driver cuts units into parts; Ray tasks tokenize the parts
    prepare_corpus([src], tmp_path / "ray-parts", engine="ray", shard_mb=0.02, val_fraction=0.2)
    assert folder_bytes(tmp_path / "local") == folder_bytes(tmp_path / "ray-parts")
    monkeypatch.undo()

    (src / "docs.jsonl").open("a").write("{broken\n")
    with pytest.raises(ValueError, match=r"docs.jsonl, line 21: not valid JSON"):
        prepare_corpus([src], tmp_path / "ray-bad", engine="ray", shard_mb=0.02)


def test_ray_engine_on_parquet_and_zstd_gives_the_same_bytes(local_ray, tmp_path, spec_texts):
    """The driver reads Parquet row groups and zstd frames and ships them: the same bytes as local workers."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import zstandard

    src = tmp_path / "src"
    src.mkdir()
    texts = [f"{i}: {spec_texts[i % 5][(i * 53) % 2000 :][:600]}" for i in range(600)]
    pq.write_table(pa.table({"text": texts}), src / "a.parquet", row_group_size=40)  # workers read these
    pq.write_table(pa.table({"text": texts[::-1]}), src / "b.parquet")  # one row group larger than a shard
    lines = "".join(json.dumps({"text": t}) + "\n" for t in texts).encode()
    c = zstandard.ZstdCompressor()
    (src / "c.jsonl.zst").write_bytes(b"".join(c.compress(lines[i : i + 20000]) for i in range(0, len(lines), 20000)))
    prepare_corpus([src], tmp_path / "local", workers=1, shard_mb=0.02, val_fraction=0.2)
    res = prepare_corpus([src], tmp_path / "ray", engine="ray", shard_mb=0.02, val_fraction=0.2)
    assert res.units >= 10
    assert folder_bytes(tmp_path / "local") == folder_bytes(tmp_path / "ray")
