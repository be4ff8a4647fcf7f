"""Reading a shard folder (a local one, a remote one, or a Megatron dataset): one split seen as a single token
stream, opened lazily. A remote folder (`RemoteShardSet`) is read in verified blocks through the machine's cache
(`tokembed.shards.remote`, `tokembed.storage`).

Readers keep only paths and metadata in picklable objects, so a `ShardSet` can cross process boundaries
(DataLoader workers) without copying memory maps; each process maps the files it reads on first use.

A reader is bound to what it opened: the manifest (a Megatron dataset's ``.idx``), by its sha256. Each file it
maps or reads later is checked against it, after the read (a stat; a hash only when the stat changed): a folder
prepared again underneath (``prepare --overwrite`` removes the manifest first and writes the new one last) is a
`ShardsChangedError` naming the folder, never windows of another corpus, or of both. A map made before the change
keeps the old file whole (the writers replace files by rename): what a reader has, it reads consistently.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tokembed._atomic import interrupted_commit
from tokembed._paths import local_path
from tokembed.shards import megatron, remote
from tokembed.shards.check import check_split, shard_file_problems
from tokembed.shards.format import (
    CHECK_HINT,
    INDEX_DTYPE,
    MANIFEST,
    ShardInfo,
    checked_manifest,
    read_manifest,
    sha256_file,
)
from tokembed.shards.schema import MANIFEST_HASH, manifest_digest
from tokembed.storage.cache import BlockSpec, FolderBlocks, Future, Pin
from tokembed.storage.options import RemoteOptions, remote_options
from tokembed.storage.stores import Store, open_store
from tokembed.storage.urls import as_url, is_url, local_path_of
from tokembed.tokenizer.base import TokenizerIdentity, TokenizerLike
from tokembed.tokenizer.registry import identity_from_manifest

__all__ = [
    "MegatronSplit",
    "MissingSplitError",
    "RemoteShardSet",
    "ShardSet",
    "ShardsChangedError",
    "expect_tokenizer",
    "open_megatron",
    "open_remote_shards",
    "open_shards",
]


class MissingSplitError(ValueError):
    """The shard folder (or Megatron dataset) has no split of the name asked for."""


class ShardsChangedError(OSError):
    """The shard folder (or Megatron dataset) a reader opened was replaced while it was being read."""


def _stat_key(path: Path) -> tuple[int, int, int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class ShardSet:
    """One split of a shard folder, seen as a single token stream.

    Token files are memory-mapped on first use and cached per process; pickling a `ShardSet` keeps only
    paths and metadata, so each DataLoader worker opens its own maps.

    Attributes:
        root: the shard folder.
        split: ``"train"`` or ``"val"`` (any split the manifest lists).
        dtype: token dtype (``<u2`` or ``<u4``).
        manifest: the parsed ``manifest.json``.
        shards: the split's `ShardInfo` list, in stream order.
        n_tokens: total tokens of the split (separators included).
        n_documents: total documents of the split.
        cumulative: int64 array ``(n_shards + 1,)``; shard ``i`` holds global tokens
            ``[cumulative[i], cumulative[i+1])``.
    """

    def __init__(self, root: Path, split: str, manifest: dict[str, Any], shards: list[ShardInfo]):
        self.root = Path(root)
        self.split = split
        self.manifest = manifest
        self.dtype = np.dtype("<u2") if manifest["dtype"] == "uint16" else np.dtype("<u4")
        self.shards = shards
        self.cumulative = np.zeros(len(shards) + 1, dtype=np.int64)  # (n_shards+1,)
        np.cumsum([s.n_tokens for s in shards], out=self.cumulative[1:])
        self.n_tokens = int(self.cumulative[-1])
        self.n_documents = sum(s.n_documents for s in shards)
        self._maps: dict[int, np.ndarray] = {}
        self._doc_starts: np.ndarray | None = None
        self._pid = os.getpid()
        self._bound: tuple[str, tuple | None, str] | None = None  # (what was opened, its stat, its sha256)

    def bind(self, path: Path, sha256: str | None = None) -> None:
        """Bind this reader to the file ``path`` as it is now (the manifest; a Megatron dataset's ``.idx``)."""
        key = _stat_key(path)
        self._bound = (str(path), key, sha256 or sha256_file(path))

    def check_unchanged(self) -> None:
        """Raise `ShardsChangedError` when the file this reader is bound to is no longer the one it opened."""
        if self._bound is None:
            return
        path, key, digest = self._bound
        now = _stat_key(Path(path))
        if now == key:
            return
        if now is not None and sha256_file(path) == digest:  # touched, or copied back: the same bytes
            self._bound = (path, now, digest)
            return
        raise ShardsChangedError(
            f"{self.describe_root()} changed while it was being read: its {Path(path).name} is not the one this reader "
            "opened (was it prepared or exported again, e.g. with --overwrite?); open it again (a new dataset or "
            "loader) to read what it holds now"
        )

    def describe_root(self) -> str:
        return f"shard folder {self.root}"

    # Pickle paths and metadata only: memory maps are reopened lazily in the receiving process.
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_maps"] = {}
        state["_doc_starts"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._pid = os.getpid()

    def __len__(self) -> int:
        return self.n_tokens

    def __repr__(self) -> str:
        return f"ShardSet({str(self.root)!r}, split={self.split!r}, shards={len(self.shards)}, documents={self.n_documents}, tokens={self.n_tokens}, dtype={self.dtype.name})"

    def describe(self) -> str:
        """Where the tokens come from, for messages: ``split 'train' of shard folder DIR``."""
        return f"split {self.split!r} of shard folder {self.root}"

    @property
    def tokenizer(self) -> TokenizerIdentity:
        """The tokenizer that wrote the ids (from the manifest; an older manifest's is GPT-2)."""
        return identity_from_manifest(self.manifest.get("tokenizer"))

    @property
    def eot_token(self) -> int | None:
        """The end-of-text id between documents (None: a Megatron prefix without tokembed's record)."""
        return self.tokenizer.eot_token

    @property
    def n_vocab(self) -> int:
        """Vocabulary size of the tokenizer that wrote the ids: the model's embedding rows."""
        return self.tokenizer.n_vocab

    def tokens(self, i: int) -> np.ndarray:
        """The tokens of shard ``i``: a read-only ``np.memmap`` ``(n_tokens_i,)``, opened once per process."""
        if os.getpid() != self._pid:  # forked: never share maps across processes
            self._maps, self._pid = {}, os.getpid()
        if not 0 <= i < len(self.shards):
            raise IndexError(
                f"shard {i} does not exist: split {self.split!r} of {self.root} has {len(self.shards)} shards"
            )
        mm = self._maps.get(i)
        if mm is None:
            info = self.shards[i]
            self.check_unchanged()  # before the map: a shard of another corpus may have another size
            if info.n_tokens == 0:  # np.memmap cannot map an empty file
                mm = np.zeros(0, dtype=self.dtype)
            else:
                mm = np.memmap(self.root / info.tokens, dtype=self.dtype, mode="r", shape=(info.n_tokens,))
            self.check_unchanged()  # after the map: a file mapped while the manifest is unchanged is the opened one
            self._maps[i] = mm
        return mm

    def index(self, i: int) -> np.ndarray:
        """Shard ``i``'s document starts, relative to the shard: int64 ``(n_documents_i,)``."""
        info = self.shards[i]
        idx = np.fromfile(self.root / info.index, dtype=INDEX_DTYPE, count=info.n_documents)
        self.check_unchanged()
        return self._checked_index(idx, i)

    def _checked_index(self, idx: np.ndarray, i: int) -> np.ndarray:
        info = self.shards[i]
        # Cheap (O(documents)) and it keeps a damaged index from sending readers out of the shard.
        if len(idx) and (idx[0] < 0 or idx[-1] >= info.n_tokens or np.any(np.diff(idx) < 1)):
            raise ValueError(
                f"{self.root}/{info.index} is damaged: its document starts are not strictly increasing within the "
                f"shard's {info.n_tokens} tokens; {CHECK_HINT.format(root=self.root)}"
            )
        return idx

    def doc_starts(self) -> np.ndarray:
        """Global offsets of every document start over the concatenated split: int64 ``(n_documents,)``."""
        if self._doc_starts is None:
            parts = [self.index(i) + self.cumulative[i] for i in range(len(self.shards))]
            self._doc_starts = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        return self._doc_starts

    def read(self, start: int, stop: int) -> np.ndarray:
        """Global tokens ``[start, stop)`` of the split, across shard boundaries: ``(stop - start,)``.

        Within one shard the result is a read-only view of the memory map (no copy); across shards it is
        a new array. Copy it before modifying.
        """
        start, stop = int(start), int(stop)
        if not 0 <= start <= stop <= self.n_tokens:
            raise IndexError(
                f"token range [{start}, {stop}) is outside split {self.split!r} of {self.root}, which has {self.n_tokens} tokens"
            )
        if start == stop:
            return np.zeros(0, dtype=self.dtype)
        first = int(np.searchsorted(self.cumulative, start, side="right")) - 1
        last = int(np.searchsorted(self.cumulative, stop, side="left")) - 1
        c = self.cumulative
        if first == last:
            return np.asarray(self.tokens(first)[start - c[first] : stop - c[first]])
        pieces = [self.tokens(first)[start - c[first] :]]
        pieces += [self.tokens(i) for i in range(first + 1, last)]
        pieces.append(self.tokens(last)[: stop - c[last]])
        return np.concatenate(pieces)

    def documents(self) -> Iterator[np.ndarray]:
        """Yield each document's tokens (without its ``<|endoftext|>``), in order, across shard boundaries."""
        starts = self.doc_starts()
        ends = np.append(starts[1:], self.n_tokens)
        for a, b in zip(starts, ends):
            yield self.read(int(a), int(b) - 1)


def expect_tokenizer(root: Path, recorded: TokenizerIdentity, tokenizer: TokenizerLike) -> None:
    """Raise when the data in ``root`` was made with another tokenizer than ``tokenizer``."""
    from tokembed.tokenizer import TokenizerMismatch, get_tokenizer, tokenizer_identity

    asked = tokenizer_identity(get_tokenizer(tokenizer))
    if not asked.same_ids(recorded):
        raise TokenizerMismatch(str(root), recorded, asked)


def open_shards(
    root: str | os.PathLike,
    *,
    split: str = "train",
    verify: bool = False,
    tokenizer: TokenizerLike | None = None,
    storage_options: Mapping[str, Any] | None = None,
    cache_dir: str | os.PathLike | None = None,
    cache_bytes: int | str | None = None,
) -> ShardSet:
    """Open one split of a shard folder written by `tokembed prepare`, or a Megatron dataset.

    Args:
        root: the shard folder, or the prefix ``out/prefix`` of Megatron's ``out/prefix.bin`` +
            ``out/prefix.idx`` (read as split ``"train"``, see `tokembed.shards.megatron`). A URL
            (``s3://bucket/prefix``, ``gs://``, ``az://``, ``hf://datasets/...``, ``https://``) opens a remote
            folder, read in verified blocks through the machine's cache (`tokembed.shards.remote`);
            ``file://`` names a local folder.
        split: which split to open (``"train"`` or ``"val"``).
        verify: also check every file's sha256 and the document index (reads the whole split once); for a
            Megatron prefix, the ``.bin``'s sha256 that tokembed's export recorded, the ids and the documents' ends.
            Without it, only the presence and size of each file are checked (cheap).
        tokenizer: the tokenizer (name, path or object) the caller expects; another one is an error.
        storage_options, cache_dir, cache_bytes: for a remote folder: the storage library's options, the cache
            folder and its bound (see `tokembed.storage.options`; defaults from the environment). Ignored for
            a local folder.

    Raises:
        FileNotFoundError: no folder or no manifest.
        ValueError: unknown split, a shard that is missing, of the wrong size, or (with ``verify``)
            damaged (the message names the shard and points at ``tokembed check DIR``), or data made with
            another tokenizer than ``tokenizer`` (names both).
    """
    if is_url(root):
        local = local_path_of(root)
        if local is None:  # remote: read through the machine's block cache
            return open_remote_shards(
                as_url(root),
                split=split,
                verify=verify,
                tokenizer=tokenizer,
                options=remote_options(storage_options=storage_options, cache_dir=cache_dir, cache_bytes=cache_bytes),
            )
        root = local
    root = local_path(root, what="the shard folder")
    if megatron.is_megatron_prefix(root):
        problems = megatron.check_megatron(root) if verify else []
        if problems:
            raise ValueError(f"Megatron dataset {root} is damaged: {problems[0]}")
        mega = open_megatron(root, split=split)
        if tokenizer is not None and mega.manifest["tokenizer"]:  # a tokembed export records its tokenizer
            expect_tokenizer(Path(root), mega.tokenizer, tokenizer)
        return mega
    stage = interrupted_commit(root.parent, root.name)
    if stage is not None and not root.is_dir():
        raise FileNotFoundError(
            f"an export to {root} was interrupted ({stage} holds its finished files); run the export again to finish it"
        )
    manifest = read_manifest(root)
    if tokenizer is not None:
        expect_tokenizer(root, identity_from_manifest(manifest.get("tokenizer")), tokenizer)
    splits = manifest["splits"]
    if split not in splits:
        raise MissingSplitError(
            f"split {split!r} is not in {root}; it has {', '.join(map(repr, splits)) or 'no splits'}"
        )
    shards = [ShardInfo.from_dict(d) for d in splits[split]["shards"]]
    itemsize = 2 if manifest["dtype"] == "uint16" else 4
    for s in shards:
        problems = shard_file_problems(root, s, itemsize)
        if problems:
            raise ValueError(f"shard {s.tokens} of {root} is damaged: {problems[0]}; {CHECK_HINT.format(root=root)}")
    if verify:
        problems = check_split(root, manifest, split, full=True)
        if problems:
            raise ValueError(
                f"{root} is damaged: {problems[0]}{f' (and {len(problems) - 1} more)' if len(problems) > 1 else ''}; {CHECK_HINT.format(root=root)}"
            )
    ss = ShardSet(root, split, manifest, shards)
    ss.bind(root / MANIFEST)
    return ss


# ----------------------------------------------------------------------------------------------- Megatron


class MegatronSplit(ShardSet):
    """A Megatron dataset (``PREFIX.bin`` + ``PREFIX.idx``) seen as one split: one shard, documents from the index.

    Everything that reads a `ShardSet` (the window datasets, the loaders, the exports) reads it; the
    format is `tokembed.shards.megatron`'s. ``manifest["tokenizer"]`` comes from ``PREFIX.tokembed.json``
    when tokembed exported the dataset, else it is ``{}`` (Megatron records no tokenizer), which
    `ShardSet.tokenizer` reads as GPT-2's ids and `eot_token` as None.
    """

    def __init__(self, prefix: Path, index: megatron.MegatronIndex, recorded: dict[str, Any]) -> None:
        n_tokens = int(index.lengths.sum(dtype=np.int64))
        starts = index.doc_starts()  # (D,) small: one int64 per document
        idx_sha256 = sha256_file(megatron.idx_path(prefix))
        info = ShardInfo(
            tokens=megatron.bin_path(prefix).name,
            index=megatron.idx_path(prefix).name,
            n_tokens=n_tokens,
            n_documents=len(starts),
            bytes=n_tokens * index.dtype.itemsize,
            # The loader's data fingerprint reads ``sha256``: the export's record of the .bin, else the
            # index's hash (the .bin is not hashed on opening: it may be terabytes).
            sha256=recorded.get("bin_sha256") or f"idx:{idx_sha256}",
            index_sha256=idx_sha256,
        )
        # No record (a dataset made elsewhere): an empty entry, which `tokenizer` reads as GPT-2's ids.
        manifest = {"format": "megatron", "tokenizer": recorded.get("tokenizer") or {}, "dtype": index.dtype.name}
        manifest["splits"] = {}
        super().__init__(prefix.parent, "train", manifest, [info])
        self.dtype = index.dtype
        self.prefix = prefix
        self._starts = np.array(starts)
        self.bind(megatron.idx_path(prefix), idx_sha256)  # a re-export replaces the .idx last

    def __repr__(self) -> str:
        return f"MegatronSplit({str(self.prefix)!r}, documents={self.n_documents}, tokens={self.n_tokens}, dtype={self.dtype.name})"

    def describe(self) -> str:
        return f"Megatron dataset {self.prefix}"

    def describe_root(self) -> str:
        return f"Megatron dataset {self.prefix}"

    @property
    def eot_token(self) -> int | None:
        eot = self.manifest["tokenizer"].get("eot_token")
        return None if eot is None else int(eot)

    def index(self, i: int) -> np.ndarray:
        if i != 0:
            raise IndexError(f"shard {i} does not exist: the Megatron dataset {self.prefix} is one shard (0)")
        return self._starts


def open_megatron(prefix: str | os.PathLike, *, split: str = "train") -> MegatronSplit:
    """Open the Megatron dataset ``PREFIX.bin``/``PREFIX.idx`` as split ``"train"`` (it has no other).

    Raises:
        ValueError: a split other than ``"train"``, or a damaged pair (see `read_megatron_index`).
    """
    prefix = Path(prefix)
    if split != "train":
        raise MissingSplitError(
            f"a Megatron dataset has no splits: {prefix} is read as split 'train', not {split!r}; "
            "give the validation data as its own prefix"
        )
    return MegatronSplit(prefix, megatron.read_megatron_index(prefix), megatron.recorded(prefix))


# ----------------------------------------------------------------------------------------------- remote folders


class RemoteShardSet(ShardSet):
    """One split of a remote shard folder (see the module's notes); picklable: each process opens the cache.

    Attributes:
        root: the folder's URL, without credentials (for messages).
        store: the `tokembed.storage.stores.Store` it is read from.
        version: the manifest's hash: the cache's key for this folder.
    """

    streamed = True

    def __init__(
        self,
        url: str,
        split: str,
        manifest: dict[str, Any],
        shards: list[ShardInfo],
        *,
        store: Store,
        options: RemoteOptions,
    ) -> None:
        super().__init__(Path("."), split, manifest, shards)
        self.root = store.where()  # type: ignore[assignment]  # a URL, not a Path
        self.store, self.options = store, options
        self.version = manifest.get(MANIFEST_HASH) or manifest_digest(manifest)
        specs = [remote.block_specs(s) for s in shards]
        self._specs = [t for t, _ in specs] + [x for _, x in specs]
        self._tpb = np.array(
            [t.block_bytes // self.dtype.itemsize or 1 for t, _ in specs], dtype=np.int64
        )  # (n_shards,)
        self._ntok = np.array([s.n_tokens for s in shards], dtype=np.int64)  # (n_shards,)
        self._blocks: tuple[int, FolderBlocks] | None = None
        self._held: tuple[int, dict[tuple[int, int], Pin]] = (os.getpid(), {})  # the last batch's blocks

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "_blocks": None, "_held": (-1, {})}

    def _last_pins(self) -> dict[tuple[int, int], Pin]:
        """The blocks the last gather of this process still holds (a forked child closes its inherited copies)."""
        pid, held = self._held
        if pid != os.getpid():
            _release(held)
            held = {}
        return held

    def release(self) -> None:
        """Let go of the blocks the last gather holds (the loader calls it when an epoch's iteration ends)."""
        _release(self._last_pins())
        self._held = (os.getpid(), {})

    def __repr__(self) -> str:
        return f"RemoteShardSet({self.root!r}, split={self.split!r}, shards={len(self.shards)}, tokens={self.n_tokens})"

    def describe(self) -> str:
        return f"split {self.split!r} of remote shard folder {self.root}"

    # -- blocks ---------------------------------------------------------------------------------------

    def blocks(self) -> FolderBlocks:
        """This process's view of the folder's blocks in the machine's cache."""
        if self._blocks is None or self._blocks[0] != os.getpid():
            cache = remote.machine_cache(self.options)
            self._blocks = (os.getpid(), cache.folder(self.version, self.store, self._specs))
        return self._blocks[1]

    def use_future(self, future: Future | None) -> None:
        """Give the cache the reader's known order (its evictions then follow Belady's rule)."""
        self.blocks().cache.future = future

    def _pin(self, pins: dict[tuple[int, int], Pin], s: int, b: int) -> Pin:
        pin = pins.get((s, b))
        if pin is None:
            pin = pins[(s, b)] = self.blocks().pin(self.shards[s].tokens, b)
        return pin

    def _file(self, spec: BlockSpec) -> bytes:
        """A whole (small) file through the cache: an index."""
        folder, parts = self.blocks(), []
        for b in range(spec.n_blocks):
            pin = folder.pin(spec.key, b)
            try:
                parts.append(bytes(pin.array(np.dtype(np.uint8))))
            finally:
                pin.release()
        return b"".join(parts)[: spec.size]

    # -- reading --------------------------------------------------------------------------------------

    def tokens(self, i: int) -> np.ndarray:
        """The tokens of shard ``i``: a new array (the whole shard is read through the cache)."""
        if not 0 <= i < len(self.shards):
            raise IndexError(f"shard {i} does not exist: {self.describe()} has {len(self.shards)} shards")
        return self.read(int(self.cumulative[i]), int(self.cumulative[i + 1]))

    def index(self, i: int) -> np.ndarray:
        spec = self._specs[len(self.shards) + i]
        idx = np.frombuffer(self._file(spec), dtype=INDEX_DTYPE).copy()
        return self._checked_index(idx, i)

    def read(self, start: int, stop: int) -> np.ndarray:
        """Global tokens ``[start, stop)`` of the split, across blocks and shards: a new array."""
        start, stop = int(start), int(stop)
        if not 0 <= start <= stop <= self.n_tokens:
            raise IndexError(
                f"token range [{start}, {stop}) is outside {self.describe()}, which has {self.n_tokens} tokens"
            )
        pins: dict[tuple[int, int], Pin] = {}
        try:
            return self._span(start, stop, pins, keep=False)
        finally:
            _release(pins)

    def _span(self, a: int, b: int, pins: dict[tuple[int, int], Pin], *, keep: bool = True) -> np.ndarray:
        """Tokens ``[a, b)``, block by block; ``keep``: the blocks stay in ``pins`` (a batch's), else each is let go
        once copied (a long read holds one block in use, so the cache keeps its bound)."""
        pieces, pos = [np.zeros(0, self.dtype)], a
        while pos < b:
            s = int(np.searchsorted(self.cumulative, pos, side="right")) - 1
            local = pos - int(self.cumulative[s])
            blk, off = divmod(local, int(self._tpb[s]))
            take = min(b - pos, int(self._tpb[s]) - off, int(self._ntok[s]) - local)
            pieces.append(self._pin(pins, s, blk).array(self.dtype)[off : off + take].copy())
            if not keep:
                pins.pop((s, blk)).release()
            pos += take
        return np.concatenate(pieces)

    def rows(self, starts: np.ndarray, width: int) -> np.ndarray:
        """Tokens ``[start, start + width)`` of each global start: (B, width), in the split's dtype.

        The blocks a batch needs are pinned (fetched and verified when missing), and stay pinned until the next
        gather (which keeps those it needs again: consecutive batches of the locality order share blocks); rows
        inside one block are gathered with one fancy index per block.
        """
        starts = np.asarray(starts, dtype=np.int64)
        out = np.empty((len(starts), width), dtype=self.dtype)
        shard = np.searchsorted(self.cumulative, starts, side="right") - 1  # (B,)
        local = starts - self.cumulative[shard]
        blk, off = np.divmod(local, self._tpb[shard])
        inside = (off + width <= self._tpb[shard]) & (local + width <= self._ntok[shard])
        code = shard * (1 << 32) + blk
        sel = np.flatnonzero(inside)
        order = sel[np.argsort(code[sel], kind="stable")]
        cuts = np.flatnonzero(np.diff(code[order])) + 1
        groups = np.split(order, cuts) if order.size else []
        held = self._last_pins()
        keys = {divmod(int(code[g[0]]), 1 << 32) for g in groups}
        pins = {k: held.pop(k) for k in keys & held.keys()}  # kept: this batch reads them again
        _release(held)  # before any fetch: the last batch's other blocks may be evicted for this one's
        try:
            for group in groups:
                s, b = divmod(int(code[group[0]]), 1 << 32)
                self._gather_block(out, group, off[group], self._pin(pins, s, b), width)
            for j in np.flatnonzero(~inside).tolist():  # the few rows across a block or shard boundary
                out[j] = self._span(int(starts[j]), int(starts[j]) + width, pins)
        finally:
            self._held = (os.getpid(), pins)
        return out

    def _gather_block(self, out: np.ndarray, rows: np.ndarray, offsets: np.ndarray, pin: Pin, width: int) -> None:
        arr = pin.array(self.dtype)
        view = np.lib.stride_tricks.as_strided(
            arr, shape=(len(arr) - width + 1, width), strides=(arr.strides[0],) * 2, writeable=False
        )
        out[rows] = view[offsets]  # the views die with this frame, before the pin is released

    def block_reads(self, starts: np.ndarray, width: int) -> tuple[np.ndarray, list[str], np.ndarray, np.ndarray]:
        """Which blocks spans ``[start, start + width)`` read: ``(span number, token file keys, shard, block)``,
        one entry per block read (a span across a block boundary reads two)."""
        starts = np.asarray(starts, dtype=np.int64)
        keys = [s.tokens for s in self.shards]
        row, shard, block = [], [], []
        for end in (starts, starts + width - 1):  # spans are shorter than a block: their two ends name them all
            s = np.searchsorted(self.cumulative, np.minimum(end, self.n_tokens - 1), side="right") - 1
            row.append(np.arange(len(starts)))
            shard.append(s)
            block.append((np.minimum(end, self.n_tokens - 1) - self.cumulative[s]) // self._tpb[s])
        r, s, b = (np.concatenate(x) for x in (row, shard, block))
        first = np.ones(len(r), dtype=bool)
        first[len(starts) :] = (s[len(starts) :] != s[: len(starts)]) | (b[len(starts) :] != b[: len(starts)])
        return r[first], keys, s[first], b[first]


def _release(pins: dict[tuple[int, int], Pin]) -> None:
    for pin in pins.values():
        pin.release()
    pins.clear()


def open_remote_shards(
    url: str, *, split: str = "train", verify: bool = False, tokenizer: Any = None, options: RemoteOptions
) -> RemoteShardSet:
    """Open one split of the shard folder at ``url`` (see `tokembed.shards.reader.open_shards`).

    Raises:
        FileNotFoundError: no bucket or no manifest (an unfinished or missing folder; names the URL).
        PermissionError: refused credentials (says where credentials come from).
        ValueError: a damaged manifest, an unknown split, another tokenizer than ``tokenizer``, a file that
            is missing or of the wrong size, or (with ``verify``) any damage `tokembed check` finds.
        ImportError: the URL scheme's library is not installed (names the pip extra).
    """
    store = open_store(url, options.storage_options)
    root = store.where()
    manifest = checked_manifest(remote.fetch_manifest(store), root)
    if tokenizer is not None:
        expect_tokenizer(root, identity_from_manifest(manifest.get("tokenizer")), tokenizer)  # type: ignore[arg-type]
    splits = manifest["splits"]
    if split not in splits:
        raise MissingSplitError(
            f"split {split!r} is not in {root}; it has {', '.join(map(repr, splits)) or 'no splits'}"
        )
    shards = [ShardInfo.from_dict(d) for d in splits[split]["shards"]]
    remote.listing_problems(store, shards)
    if verify:
        problems = check_split(Path(root), manifest, split, full=True, stage=remote.download_stage(store))
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise ValueError(f"{root} is damaged: {problems[0]}{more}; {CHECK_HINT.format(root=root)}")
    return RemoteShardSet(url, split, manifest, shards, store=store, options=options)
