"""A URL without a bucket is named as such, not as one carrying credentials (review2)."""

from __future__ import annotations

import pytest

from tokembed.storage.stores import open_store
from tokembed.storage.urls import refuse_credentials


@pytest.mark.parametrize("url", ["s3://", "gs://"])
def test_a_url_without_a_bucket_says_so(url):
    with pytest.raises(ValueError, match=r"names no bucket .*; write (s3|gs)://bucket/prefix") as e:
        open_store(url)
    assert "credentials" not in str(e.value)


@pytest.mark.parametrize("url", ["s3://key:secret@bkt/x", "s3://bkt/x?X-Amz-Signature=abc", "s3://bkt/x#frag"])
def test_credentials_and_query_strings_are_still_refused(url):
    with pytest.raises(ValueError, match=r"^s3://bkt/x: the URL carries credentials or a query string") as e:
        refuse_credentials(url)
    assert "secret" not in str(e.value) and "abc" not in str(e.value)


def test_a_plain_url_passes():
    assert refuse_credentials("s3://bkt/x") == "s3://bkt/x"
    assert refuse_credentials("hf://datasets/org/name/shards") == "hf://datasets/org/name/shards"
