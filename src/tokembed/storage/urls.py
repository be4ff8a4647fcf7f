"""URLs of remote storage, and which library serves each scheme.

A scheme is one `Scheme` in `SCHEMES` (register more with `register_scheme`): its fsspec protocol, the
Python package that implements it and the pip extra that installs that package. The messages and ``--help``
derive their lists from this table.

``file://`` URLs are local paths (`local_path_of`): they are read in place, never through the cache. What looks
like a URL is decided in one place, `tokembed._paths` (`is_url`, `as_url`, which also undo a `Path`'s folding of
``s3://b`` to ``s3:/b``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from tokembed._paths import as_url, is_url, url_scheme  # one recognition of URLs for the whole package

__all__ = [
    "SCHEMES",
    "Scheme",
    "as_url",
    "is_url",
    "join_url",
    "local_path_of",
    "public_url",
    "refuse_credentials",
    "register_scheme",
    "scheme_of",
    "url_scheme",
]


@dataclass(frozen=True)
class Scheme:
    """How one URL scheme is served.

    Attributes:
        name: the scheme as users write it (``"s3"`` in ``s3://bucket/key``).
        protocol: the fsspec protocol that serves it.
        package: the module fsspec needs for it (imported to check it is there).
        extra: the tokembed pip extra that installs it (``pip install 'tokembed[EXTRA]'``).
        obstore: obstore can read it too (``TOKEMBED_STORAGE_BACKEND=obstore``).
        description: what it is, for ``--help`` and messages.
    """

    name: str
    protocol: str
    package: str
    extra: str
    obstore: bool = False
    description: str = ""

    def install_hint(self) -> str:
        return f"pip install 'tokembed[{self.extra}]'"


SCHEMES: dict[str, Scheme] = {}


def register_scheme(scheme: Scheme, *, replace: bool = False) -> None:
    """Add a scheme to `SCHEMES` (an fsspec filesystem of a library tokembed does not know yet)."""
    if scheme.name in SCHEMES and not replace:
        raise ValueError(f"URL scheme {scheme.name!r} is registered already; pass replace=True to replace it")
    SCHEMES[scheme.name] = scheme


for _s in (
    Scheme("s3", "s3", "s3fs", "s3", obstore=True, description="Amazon S3 and S3-compatible stores"),
    Scheme("gs", "gs", "gcsfs", "gcs", obstore=True, description="Google Cloud Storage"),
    Scheme("gcs", "gs", "gcsfs", "gcs", obstore=True, description="Google Cloud Storage"),
    Scheme("az", "az", "adlfs", "azure", obstore=True, description="Azure Blob Storage"),
    Scheme("abfs", "abfs", "adlfs", "azure", obstore=True, description="Azure Data Lake Storage Gen2"),
    Scheme("hf", "hf", "huggingface_hub", "hf", description="the Hugging Face Hub (hf://datasets/...)"),
    Scheme("https", "https", "aiohttp", "http", obstore=True, description="any web server (read only)"),
    Scheme("http", "http", "aiohttp", "http", obstore=True, description="any web server (read only)"),
):
    register_scheme(_s)


def local_path_of(url: str | os.PathLike) -> str | None:
    """The local path a ``file://`` URL names (None for any other URL or path)."""
    if url_scheme(url) != "file":
        return None
    return "/" + as_url(url)[len("file:///") :]


def scheme_of(url: str) -> Scheme:
    """The registered `Scheme` of ``url``.

    Raises:
        ValueError: a scheme tokembed does not know; names the ones it does.
    """
    name = url_scheme(url)
    scheme = SCHEMES.get(name or "")
    if scheme is None:
        known = ", ".join(f"{n}://" for n in sorted(SCHEMES))
        raise ValueError(
            f"{public_url(url)}: tokembed does not read the URL scheme {name!r}; it reads {known} and file:// "
            "(or register an fsspec filesystem with tokembed.storage.register_scheme)"
        )
    return scheme


def join_url(url: str, *parts: str) -> str:
    """``url`` with ``parts`` appended as path components (``s3://b/p`` + ``train/00000.bin``)."""
    base = as_url(url).rstrip("/")
    tail = "/".join(p.strip("/") for p in parts if p)
    return f"{base}/{tail}" if tail else base


def public_url(url: str | os.PathLike) -> str:
    """``url`` fit for messages, manifests and logs: no ``user:password@`` and no query string (it may carry a
    signature or a SAS token). A local path is returned as it is."""
    text = as_url(url)
    if not is_url(text):
        return text
    parts = urlsplit(text)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def refuse_credentials(url: str | os.PathLike) -> str:
    """``url`` (as typed) when it names a bucket and carries no ``user:password@`` and no query string; else a
    ValueError.

    A URL is recorded in manifests, checkpoints and logs, so credentials in it would be written there; they go
    through the environment or the storage options instead. The message shows the URL without them.
    """
    text = as_url(url)
    parts = urlsplit(text)
    if is_url(text) and url_scheme(text) != "file" and not parts.netloc:
        raise ValueError(
            f"{text} names no bucket (or host); write {parts.scheme}://bucket/prefix, e.g. {parts.scheme}://my-bucket/shards"
        )
    if public_url(text) != text:
        raise ValueError(
            f"{public_url(text)}: the URL carries credentials or a query string, which tokembed would record in "
            "manifests, checkpoints and logs; give credentials through the environment or --storage-option instead"
        )
    return text
