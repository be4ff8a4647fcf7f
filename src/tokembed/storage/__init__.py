"""Stage 1 (beside the tokenizer): bytes from anywhere, through a bounded, verified cache (torch-free).

urls (schemes and the libraries that serve them) -> stores (`open_store`: ranged reads, listings, uploads via
fsspec or obstore; retries; errors that name the URL) -> cache (`BlockCache`: verified blocks on local disk,
shared by every process of a machine, bounded, Belady's eviction) <- future (`NextUse`: when each block is
needed next, from the loader's known order). options holds the settings (cache folder and bound, storage
options; never shown in messages). The shard reader of remote folders is `tokembed.shards.remote`.
"""

from __future__ import annotations

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

__getattr__, __dir__ = lazy_attributes("tokembed.storage", globals(), _PUBLIC)
