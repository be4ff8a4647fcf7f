"""``prepare --out URL --overwrite`` replaces a shard folder, never objects tokembed did not write (review2).

A local ``--overwrite`` never deletes files that are not shard files; the same holds for a bucket: a prefix that
also holds a user's other objects (``--out s3://bucket`` at a bucket's root, notes, another dataset) is refused,
and every object is still there.
"""

from __future__ import annotations

import pytest
from remote_helpers import put_bytes

import tokembed
from tokembed.storage.stores import open_store

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("finished_before", [True, False])
def test_overwrite_refuses_objects_tokembed_did_not_write(story, s3, tmp_path, finished_before):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text(story)
    b.write_text(story[::-1])
    url = s3.url("mixed")
    if finished_before:
        tokembed.prepare_corpus([a], url)
    put_bytes(f"{url}/notes/README.md", b"my notes")
    put_bytes(f"{url}/eval/questions.jsonl", b'{"q": 1}\n')
    before = open_store(url).listing()
    with pytest.raises(FileExistsError, match=rf"{url} holds objects tokembed did not write \(eval/questions.jsonl"):
        tokembed.prepare_corpus([b], url, overwrite=True)
    assert open_store(url).listing() == before  # nothing deleted, not even the old manifest
    if finished_before:
        assert tokembed.open_shards(url).n_tokens > 0  # the old folder still reads as finished
