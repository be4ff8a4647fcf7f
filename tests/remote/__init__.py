"""Tests of remote shard folders against an S3 server on loopback (OpenStack Swift with s3api)."""
