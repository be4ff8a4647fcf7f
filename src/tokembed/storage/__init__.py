"""Stage 1 (beside the tokenizer): bytes from anywhere, through a bounded, verified cache (torch-free).

urls (schemes and the libraries that serve them) -> stores (`open_store`: ranged reads, listings, uploads via
fsspec or obstore; retries; errors that name the URL) -> cache (`BlockCache`: verified blocks on local disk,
shared by every process of a machine, bounded, Belady's eviction) <- future (`NextUse`: when each block is
needed next, from the loader's known order). options holds the settings (cache folder and bound, storage
options; never shown in messages). The shard reader of remote folders is `tokembed.shards.remote`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tokembed._lazy import lazy_attributes

_PUBLIC = {
    "SCHEMES": "urls",
    "Scheme": "urls",
    "is_url": "urls",
    "register_scheme": "urls",
    "RemoteError": "stores",
    "Store": "stores",
    "open_store": "stores",
    "BlockCache": "cache",
    "CorruptBlockError": "cache",
    "NextUse": "future",
    "RemoteOptions": "options",
    "parse_size": "options",
    "parse_storage_options": "options",
    "set_remote_defaults": "options",
}

__all__ = sorted(_PUBLIC)

# What type checkers and editors see (the same names, from their modules); at run time each loads on first use.
if TYPE_CHECKING:
    from tokembed.storage.cache import BlockCache as BlockCache
    from tokembed.storage.cache import CorruptBlockError as CorruptBlockError
    from tokembed.storage.future import NextUse as NextUse
    from tokembed.storage.options import RemoteOptions as RemoteOptions
    from tokembed.storage.options import parse_size as parse_size
    from tokembed.storage.options import parse_storage_options as parse_storage_options
    from tokembed.storage.options import set_remote_defaults as set_remote_defaults
    from tokembed.storage.stores import RemoteError as RemoteError
    from tokembed.storage.stores import Store as Store
    from tokembed.storage.stores import open_store as open_store
    from tokembed.storage.urls import SCHEMES as SCHEMES
    from tokembed.storage.urls import Scheme as Scheme
    from tokembed.storage.urls import is_url as is_url
    from tokembed.storage.urls import register_scheme as register_scheme

__getattr__, __dir__ = lazy_attributes("tokembed.storage", globals(), _PUBLIC)
