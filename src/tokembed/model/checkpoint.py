"""Training checkpoints on disk: a directory written whole or not at all.

    CKPT/config.json          {"format": "tokembed-checkpoint", "version": 1, "model": {GPTConfig},
                               "tokenizer": "gpt2", "tokenizer_record": {the data manifest's
                               tokenizer entry}, "train": {TrainConfig}, "step": int, "tokens_seen": int}
    CKPT/model.safetensors    the weights; with tied embeddings only ``embed.token.weight`` (not ``head.weight``)
    CKPT/optimizer.pt         AdamW state (torch.save)
    CKPT/state.json           loader state, RNG state, step: what exact resume needs
    CKPT/log.json             {"train": [{"step", "tokens", "loss", "lr", "tokens_per_s"}, ...], "val": [{"step", "loss"}, ...]}
    CKPT/loss.png             the loss curves (when matplotlib is installed)
    CKPT/token_counts.safetensors  (V,) how many times training read each id (``tokembed.training.counts``)
    CKPT/sha256.json          {"format": "tokembed-checksums", "files": {file name: sha256} of every file above,
                               "sha256": sha256 of json.dumps(files, sort_keys=True, separators=(",", ":"))},
                               written last (tokembed 0.1 wrote the bare {file name: sha256})

Saving writes everything into ``CKPT.tmp-XXXX/`` beside ``CKPT`` (marked as tokembed's by a file that names the
folder, `tokembed._atomic.write_marker`), fsyncs each file, then renames the previous checkpoint to
``CKPT.step-NNNNNNN`` (its step; marked too) and the new folder to ``CKPT``. Files a user put inside ``CKPT`` move on
into the new one. Of the previous checkpoints, the newest ``keep - 1`` stay (``--keep``), older ones are removed.
Only folders whose marker names them, and in them only the files tokembed wrote, are ever removed: a user's
``CKPT.tmp-mydata/`` or ``CKPT.old-backup/`` is never touched. If the process dies between the two renames, there is
no ``CKPT`` and the previous checkpoint is the newest ``CKPT.step-*``; resuming takes the newest complete one
(`resume_checkpoint`). Folders and files get the modes ``open`` gives (the umask). A ``CKPT`` that is a symbolic
link stays one: the saves and the kept checkpoints go beside the folder it points to. A folder that is not empty
and not a tokembed checkpoint is never saved over (its ``config.json`` could be a user's).

Reading verifies every file against ``sha256.json`` first (`verify_checkpoint`: ``load_checkpoint`` and so
``eval``, ``inspect`` and ``report``, and ``--resume``), so a flipped bit anywhere, sha256.json included, is an
error naming that file, never a silently different model. A checkpoint without sha256.json, or whose sha256.json
leaves out a file it holds, is an error; ``allow_unverified=True`` (``--allow-unverified``) reads one written
before tokembed 0.2 unverified, and a file that cannot be parsed is named all the same (`read_checkpoint_file`).
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import pickle
import re
import tempfile
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from tokembed._atomic import (
    MARKER,
    fsync_dir,
    read_marker,
    remove_marked,
    remove_unmarked_start,
    write_failure,
    write_marker,
)
from tokembed._checks import check_positive_int
from tokembed._paths import CHECKPOINT_FORMAT, local_path
from tokembed._plot import write_loss_png
from tokembed.model.config import GPTConfig
from tokembed.model.gpt import GPT

__all__ = [
    "CHECKPOINT_FORMAT",
    "CHECKPOINT_VERSION",
    "load_checkpoint",
    "read_checkpoint_config",
    "kept_checkpoints",
    "read_checkpoint_file",
    "resume_checkpoint",
    "save_checkpoint",
    "verify_checkpoint",
]

CHECKPOINT_VERSION = 1
CHECKSUMS = "sha256.json"
# The files tokembed writes into a checkpoint (others of `save_checkpoint`'s extra_files are listed in sha256.json).
OWN_FILES = (
    "config.json",
    "model.safetensors",
    "optimizer.pt",
    "state.json",
    "log.json",
    "loss.png",
    "token_counts.safetensors",  # tokembed.training.counts.COUNTS_FILE
    CHECKSUMS,
)
REQUIRED = ("config.json", "model.safetensors")  # listed in every sha256.json
_CHECKSUMS_FORMAT = "tokembed-checksums"
_HEX64 = re.compile(r"[0-9a-f]{64}")
_KEPT = re.compile(r"\.step-(\d+)(\.\d+)?")


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def _write_json(path: Path, obj: Any) -> None:
    # Inside the checkpoint's temporary folder: the folder's rename is the atomic step.
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())


def model_state_for_disk(model: GPT) -> dict[str, torch.Tensor]:
    """The weights to store: the state dict without ``head.weight`` when it is the token table."""
    state = model.state_dict()
    if model.config.tie_embeddings:
        state.pop("head.weight", None)  # the same tensor as embed.token.weight
    return {k: v.detach().contiguous().cpu() for k, v in state.items()}


def save_checkpoint(
    path: str | os.PathLike,
    model: GPT,
    *,
    train: dict | None = None,
    step: int = 0,
    tokens_seen: int = 0,
    optimizer: torch.optim.Optimizer | None = None,
    state: dict | None = None,
    log: dict | None = None,
    plot: bool = True,
    extra_files: Mapping[str, Callable[[Path], object]] | None = None,
    tokenizer: dict | None = None,
    keep: int = 1,
) -> Path:
    """Write a checkpoint directory atomically (see the module docstring) and return its path.

    Args:
        path: the checkpoint directory; an existing one is replaced only once the new one is complete.
        model: the GPT whose weights and config are stored.
        train: the training config (a dict), stored under ``"train"``.
        step, tokens_seen: progress so far.
        optimizer: its ``state_dict()`` goes to ``optimizer.pt``.
        state: JSON-serialisable resume state (loader, RNG, ...) for ``state.json``.
        log: the training log for ``log.json`` (and ``loss.png`` when ``plot`` and matplotlib is installed).
        plot: draw ``loss.png`` from ``log``.
        extra_files: file name -> a function that writes that file at the path it is given; each is written inside the new checkpoint before it replaces the old one.
        tokenizer: the training data's tokenizer record (the manifest's entry); default GPT-2's name.
        keep: how many checkpoints to keep: this one and the ``keep - 1`` newest previous ones
            (``CKPT.step-NNNNNNN`` beside it).
    """
    path = _through_link(local_path(path, what="the checkpoint"))
    keep = check_positive_int("keep", keep)
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(f"checkpoint {path} is a file; give a folder path for the checkpoint")
    if path.is_dir() and not _replaceable(path):  # retiring it would prune a user's config.json, model.safetensors
        raise FileExistsError(
            f"{path} is not a tokembed checkpoint (its config.json is not one, or it has none) and is not empty; "
            "save the checkpoint into another folder, or move its files out"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_saves(path)
    tmp = Path(tempfile.mkdtemp(prefix=f"{path.name}.tmp-", dir=path.parent))
    own = [*OWN_FILES, *(extra_files or {})]
    try:
        write_marker(tmp, role="save", of=path.name, files=own)  # first: from here on a killed save is one
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700; give the mode mkdir would
        _write_contents(
            tmp,
            model,
            train=train,
            step=step,
            tokens_seen=tokens_seen,
            optimizer=optimizer,
            state=state,
            log=log,
            tokenizer=tokenizer,
        )
        if log is not None and plot:
            write_loss_png(log, tmp / "loss.png")
        for name, write in (extra_files or {}).items():
            write(tmp / name)
        for p in tmp.iterdir():
            os.chmod(p, 0o666 & ~_umask())  # safetensors writes 0600: give every file the mode open() would
        sums = {n: _sha256(tmp / n) for n in sorted(own) if n != CHECKSUMS and (tmp / n).is_file()}
        _write_json(tmp / CHECKSUMS, _checksum_document(sums))  # last: it vouches for every file before it
        fsync_dir(tmp)
    except BaseException as e:
        full = write_failure(e, path, what=f"the checkpoint {path} is the previous one, intact")  # before cleaning
        with contextlib.suppress(OSError):
            remove_marked(tmp, own)
        if full is not None:  # a full disk: torch says "PytorchStreamWriter failed writing file", safetensors less
            raise full from None
        raise
    _swap_in(tmp, path, keep=keep)
    return path


def _replaceable(path: Path) -> bool:
    """Whether a save may replace the existing folder ``path``: an empty one, or a tokembed checkpoint (its
    config.json or its sha256.json says so: a checkpoint with a damaged config.json is still one)."""
    if not any(path.iterdir()):
        return True
    for name, kind in (("config.json", CHECKPOINT_FORMAT), (CHECKSUMS, _CHECKSUMS_FORMAT)):
        with contextlib.suppress(OSError, ValueError):
            doc = json.loads((path / name).read_text(encoding="utf-8"))
            if isinstance(doc, dict) and doc.get("format") == kind:
                return True
    return False


def _write_contents(
    tmp: Path,
    model: GPT,
    *,
    train: dict | None,
    step: int,
    tokens_seen: int,
    optimizer: torch.optim.Optimizer | None,
    state: dict | None,
    log: dict | None,
    tokenizer: dict | None,
) -> None:
    config = {
        "format": CHECKPOINT_FORMAT,
        "version": CHECKPOINT_VERSION,
        "model": model.config.to_dict(),
        "tokenizer": (tokenizer or {}).get("name", "gpt2"),
        **({"tokenizer_record": tokenizer} if tokenizer else {}),
        "train": train or {},
        "step": int(step),
        "tokens_seen": int(tokens_seen),
    }
    _write_json(tmp / "config.json", config)
    save_file(model_state_for_disk(model), str(tmp / "model.safetensors"), metadata={"format": "pt"})
    _fsync_file(tmp / "model.safetensors")
    if optimizer is not None:
        torch.save(_to_cpu(optimizer.state_dict()), tmp / "optimizer.pt")  # loads on any device
        _fsync_file(tmp / "optimizer.pt")
    if state is not None:
        _write_json(tmp / "state.json", state)
    if log is not None:
        _write_json(tmp / "log.json", log)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            h.update(block)
    return h.hexdigest()


def _remove_stale_saves(path: Path) -> None:
    """Delete what killed saves of ``path`` left beside it: ``CKPT.tmp-*`` folders that tokembed marked as its saves
    (never complete), and in them only the files a save writes. A folder that merely has such a name is kept, and
    so is a save of another checkpoint whose name starts so (``CKPT.tmp-b``'s saves are ``CKPT.tmp-b.tmp-*``)."""
    for p in path.parent.glob(f"{glob.escape(path.name)}.tmp-*"):
        if remove_unmarked_start(p, f"{path.name}.tmp-"):  # killed before its marker was written
            continue
        marker = read_marker(p)
        if marker is not None and marker.get("role") == "save" and marker.get("of", path.name) == path.name:
            with contextlib.suppress(OSError):
                remove_marked(p, marker.get("files", OWN_FILES))


def _digest_of(files: Mapping[str, str]) -> str:
    return hashlib.sha256(json.dumps(dict(files), sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _checksum_document(files: Mapping[str, str]) -> dict[str, Any]:
    """sha256.json's content: the files' sha256 and a sha256 of that list (so damage to it is named as its own)."""
    return {"format": _CHECKSUMS_FORMAT, "files": dict(files), "sha256": _digest_of(files)}


def _checksum_entries(doc: object) -> dict[str, str] | None:
    """``{file name: sha256}`` of a parsed sha256.json, or None when it is not one (or fails its own sha256).
    tokembed 0.1 wrote the bare ``{name: sha256}`` (no seal of its own): read as it is."""
    if isinstance(doc, dict) and doc.get("format") == _CHECKSUMS_FORMAT:
        files = doc.get("files")
        if not isinstance(files, dict) or doc.get("sha256") != _digest_of(files):
            return None
        return {str(k): v for k, v in files.items()}
    if isinstance(doc, dict) and doc and all(isinstance(v, str) and _HEX64.fullmatch(v) for v in doc.values()):
        return {str(k): v for k, v in doc.items()}
    return None


def _own_names(folder: Path) -> set[str]:
    """The files of checkpoint ``folder`` that tokembed wrote: the known ones and those its sha256.json lists."""
    names = set(OWN_FILES)
    with contextlib.suppress(OSError, ValueError):
        names |= set(_checksum_entries(json.loads((folder / CHECKSUMS).read_text(encoding="utf-8"))) or {})
    return names


def _through_link(path: Path) -> Path:
    """Where a checkpoint ``path`` that is a symbolic link points (dangling too: a save killed between its renames):
    saves and their kept checkpoints go there, and the link stays a link."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def kept_checkpoints(path: str | os.PathLike) -> list[tuple[int, Path]]:
    """The previous checkpoints kept beside ``path`` (``CKPT.step-NNNNNNN``, marked by tokembed), newest first;
    beside the folder it points to when ``path`` is a symbolic link."""
    path = _through_link(Path(path))
    found = []
    for p in path.parent.glob(f"{glob.escape(path.name)}.step-*") if path.parent.is_dir() else []:
        marker = read_marker(p)
        m = _KEPT.fullmatch(p.name[len(path.name) :])
        if marker is not None and marker.get("role") == "kept" and marker.get("of") == path.name and m:
            found.append((int(m.group(1)), p))
    return sorted(found, key=lambda x: (x[0], x[1].name), reverse=True)


def _retire(path: Path) -> Path:
    """Rename the checkpoint ``path`` to ``CKPT.step-NNNNNNN`` beside it, marked as a kept one of tokembed's."""
    step = _step_of(path)
    base = f"{path.name}.step-{step:07d}"
    target, n = path.parent / base, 0
    while target.exists() or target.is_symlink():
        if (step, target) in kept_checkpoints(path):  # an earlier save of the same step
            with contextlib.suppress(OSError):
                remove_marked(target, (read_marker(target) or {}).get("files", OWN_FILES))
        if target.exists() or target.is_symlink():
            n += 1
            target = path.parent / f"{base}.{n}"
    own = sorted(n for n in _own_names(path) if (path / n).exists())
    # The marker names the target: inert until the rename, the mark of a kept checkpoint after it.
    write_marker(path, name=target.name, role="kept", of=path.name, step=step, files=own)
    os.replace(path, target)
    return target


def _step_of(path: Path) -> int:
    """The step of the checkpoint ``path`` (0 when its config cannot be read: kept all the same, as the oldest)."""
    try:
        return int(json.loads((path / "config.json").read_text(encoding="utf-8"))["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def _carry_over(previous: Path, path: Path) -> None:
    """Move what a user put into the previous checkpoint (anything tokembed did not write) into the new one."""
    marker = read_marker(previous) or {}
    own = {*marker.get("files", OWN_FILES), MARKER}
    for p in previous.iterdir():
        if p.name not in own and not (path / p.name).exists() and not (path / p.name).is_symlink():
            os.replace(p, path / p.name)
    fsync_dir(path)
    fsync_dir(previous)


def _to_cpu(obj):
    """A state dict with every tensor on the CPU (a checkpoint written on a GPU resumes on a CPU)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_cpu(v) for v in obj)
    return obj


def _swap_in(tmp: Path, path: Path, *, keep: int) -> None:
    """Put the finished ``tmp`` folder at ``path``: the previous checkpoint is kept beside it first (renamed),
    then pruned to the ``keep - 1`` newest. A kept one of the new checkpoint's own step is superseded by it (a
    resume that saves its step again, with the evaluation a stop skipped): removed, never counted as a previous."""
    previous = _retire(path) if path.exists() else None
    os.replace(tmp, path)  # the new checkpoint is in place
    (path / MARKER).unlink(missing_ok=True)  # the save's marker: it names the temporary folder, inert here
    fsync_dir(path.parent)
    if previous is not None:
        _carry_over(previous, path)
    step, kept = _step_of(path), kept_checkpoints(path)
    superseded = [p for s, p in kept if s == step]
    for old in superseded + [p for s, p in kept if s != step][keep - 1 :]:
        with contextlib.suppress(OSError):
            remove_marked(old, (read_marker(old) or {}).get("files", OWN_FILES))


def resume_checkpoint(path: str | os.PathLike, *, allow_unverified: bool = False) -> None:
    """Make ``path`` the newest complete checkpoint of its run before a resume.

    When ``path`` is missing (a save killed between its renames) or fails its checksums while a kept previous
    checkpoint (``CKPT.step-*``) is complete, that one is renamed to ``path`` and a warning says so; a damaged
    ``path`` is moved aside to ``CKPT.damaged-XXXX`` first (never deleted). Otherwise a damaged ``path`` is an
    error naming the damaged file, before anything else is read from it. Processes that run this at once (the
    ranks of a torchrun job) leave the checkpoint the first of them restored in place.
    """
    path = _through_link(Path(path))
    kept = kept_checkpoints(path)
    seen = _inode(path)  # every rank of a torchrun job runs this at once: the first to rename restores it
    problem = "missing (a save was interrupted between its renames)"
    if path.is_dir():
        try:
            read_checkpoint_config(path)
            verify_checkpoint(path, allow_unverified=allow_unverified)
            return
        except (OSError, ValueError) as e:
            if not kept:
                raise
            problem = f"damaged ({str(e).split('; ')[0]})"
    for step, previous in kept:
        try:
            verify_checkpoint(previous)
        except (OSError, ValueError):
            continue
        if _inode(path) != seen and _whole(path, allow_unverified):  # another process (a rank) restored it meanwhile
            return
        aside = ""
        if path.exists():
            moved = Path(tempfile.mkdtemp(prefix=f"{path.name}.damaged-", dir=path.parent))
            os.replace(path, moved)  # over the empty folder mkdtemp made
            aside = f"; it was moved to {moved}"
        try:
            os.replace(previous, path)
        except FileNotFoundError:  # another process renamed it first: that is the restored checkpoint
            if _whole(path, allow_unverified):
                return
            raise
        (path / MARKER).unlink(missing_ok=True)
        fsync_dir(path.parent)
        warnings.warn(
            f"checkpoint {path} is {problem}{aside}; resuming from the previous checkpoint {previous} (step {step})",
            stacklevel=2,
        )
        return


def _inode(path: Path) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def _whole(path: Path, allow_unverified: bool) -> bool:
    """Whether ``path`` is a checkpoint that reads and verifies."""
    try:
        read_checkpoint_config(path)
        verify_checkpoint(path, allow_unverified=allow_unverified)
    except (OSError, ValueError):
        return False
    return True


def interrupted_save_hint(path: Path) -> str:
    """For a missing checkpoint ``path``: where the previous one is when a save was killed between its renames."""
    path = _through_link(path)
    kept = kept_checkpoints(path)
    if kept:
        return f"; a save was interrupted: the previous checkpoint is {kept[0][1]} (step {kept[0][0]}), which --resume continues"
    olds = (  # left by a tokembed before 0.2 (CKPT.old-XXXX/ckpt)
        sorted(p for p in path.parent.glob(f"{glob.escape(path.name)}.old-*/ckpt") if (p / "config.json").exists())
        if path.parent.exists()
        else []
    )
    return f"; a save was interrupted: the previous checkpoint is {olds[-1]} (move it to {path})" if olds else ""


def verify_checkpoint(path: str | os.PathLike, *, allow_unverified: bool = False) -> bool:
    """Check every file of checkpoint ``path`` against its ``sha256.json``.

    Every checkpoint tokembed writes has one, listing every file it wrote, with a sha256 of that list itself;
    a checkpoint without one is refused unless ``allow_unverified`` (for checkpoints written before tokembed 0.2),
    which warns once and is remembered for ``path`` in this process. A check passed before is not repeated while
    the files are unchanged (same size, time and inode).

    Returns:
        True when verified; False for a checkpoint without sha256.json loaded with ``allow_unverified``.

    Raises:
        ValueError: a file is damaged or missing, or ``sha256.json`` is missing, damaged or incomplete; the
            message names the damaged file.
    """
    path = Path(path)
    key = os.path.realpath(path)
    if not (path / CHECKSUMS).is_file():
        if allow_unverified and key not in _UNVERIFIED:
            warnings.warn(
                f"checkpoint {path} has no {CHECKSUMS}: loaded without verification (allow_unverified); "
                "a damaged file in it goes unnoticed",
                stacklevel=2,
            )
            _UNVERIFIED.add(key)
        if key in _UNVERIFIED:
            return False
        raise ValueError(
            f"checkpoint {path} has no {CHECKSUMS}: every checkpoint tokembed writes has one, so it was deleted "
            f"({_DAMAGED_HINT}), or the checkpoint was written before tokembed 0.2: load that without verification "
            "with allow_unverified=True (--allow-unverified)"
        )
    files = _read_checksums(path)
    present = [n for n in OWN_FILES if n != CHECKSUMS and (path / n).is_file()]
    unlisted = [n for n in dict.fromkeys([*REQUIRED, *present]) if n not in files]
    if unlisted:
        raise ValueError(
            f"checkpoint file {path / CHECKSUMS} is incomplete: it lists no {unlisted[0]} (every checkpoint lists "
            f"each file it holds); {_DAMAGED_HINT}"
        )
    stamp = _stamp(path, files)
    if _VERIFIED.get(key) != stamp:
        _check_files(path, files)
        _VERIFIED[key] = stamp
    return True


_VERIFIED: dict[str, tuple] = {}  # checkpoint -> the files' stat when they last verified
_UNVERIFIED: set[str] = set()  # checkpoints without sha256.json accepted with allow_unverified


def _stamp(path: Path, files: Mapping[str, str]) -> tuple:
    stats = []
    for name in sorted([*files, CHECKSUMS]):
        try:
            st = os.stat(path / name)
        except OSError:
            return ()
        stats.append((name, st.st_size, st.st_mtime_ns, st.st_ino))
    return tuple(stats)


def _read_checksums(path: Path) -> dict[str, str]:
    doc = read_checkpoint_file(path, CHECKSUMS, lambda p: json.loads(p.read_text(encoding="utf-8")))
    files = _checksum_entries(doc)
    if files is None:
        raise ValueError(
            f"checkpoint file {path / CHECKSUMS} is damaged (not tokembed's checksums, or its own sha256 differs from "
            f"the one saved with it); {_DAMAGED_HINT}"
        )
    return files


def _check_files(path: Path, files: Mapping[str, str]) -> None:
    for name, digest in files.items():
        p = path / str(name)
        if not p.is_file() or "/" in str(name):
            raise ValueError(f"checkpoint file {p} is missing; {_DAMAGED_HINT}")
        if _sha256(p) != digest:
            raise ValueError(
                f"checkpoint file {p} is damaged (its sha256 differs from the one saved with it); {_DAMAGED_HINT}"
            )


def _explain(path: Path) -> None:
    """When reading failed: name a damaged file if the checksums show one (nothing more to say without them)."""
    if (path / CHECKSUMS).is_file():
        verify_checkpoint(path)


_DAMAGED_HINT = "restore the checkpoint from a copy, or train again into a new --out"


def _utf8(path: Path) -> bool:
    try:
        os.fsencode(path).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def read_safetensors(path: Path, *, device: str = "cpu") -> dict[str, torch.Tensor]:
    """A safetensors file's tensors. safetensors takes a path only as UTF-8 text: a checkpoint in a folder whose
    name is not UTF-8 (bytes ``os.fsdecode`` keeps as surrogates) is read through its bytes instead."""
    if _utf8(path):
        return load_file(str(path), device=device)
    from safetensors.torch import load

    return {k: v.to(device) for k, v in load(Path(path).read_bytes()).items()}


@contextlib.contextmanager
def open_safetensors(path: Path):
    """``safetensors.safe_open(path)`` (tensors read on demand), for a path that is not UTF-8 too (all read)."""
    from safetensors import safe_open

    if _utf8(path):
        with safe_open(str(path), framework="pt") as f:
            yield f
    else:
        yield _Tensors(read_safetensors(path))


class _Tensors:
    """What `open_safetensors` yields for a path safetensors cannot open: the tensors, read already."""

    def __init__(self, tensors: dict[str, torch.Tensor]) -> None:
        self.tensors = tensors

    def keys(self) -> list[str]:
        return list(self.tensors)

    def get_tensor(self, key: str) -> torch.Tensor:
        return self.tensors[key]


def read_checkpoint_file(path: Path, name: str, reader: Callable[[Path], Any]) -> Any:
    """``reader(path / name)``, with any failure to parse the file reported as one ValueError naming it
    (instead of a SafetensorError, a pickle or JSON error from deep inside)."""
    from safetensors import SafetensorError

    p = Path(path) / name
    if not p.is_file():
        raise FileNotFoundError(f"checkpoint file {p} is missing; the checkpoint is incomplete")
    try:
        return reader(p)
    except (
        ValueError,
        RuntimeError,
        EOFError,
        KeyError,
        TypeError,
        pickle.UnpicklingError,
        SafetensorError,
        OSError,
    ) as e:
        if isinstance(e, OSError) and type(e) is not OSError:  # PermissionError, IsADirectoryError, ...: not damage
            raise
        # (a bare OSError is torch's zip reader seeking past the end of a cut file: EINVAL)
        why = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        raise ValueError(f"checkpoint file {p} is damaged ({why}); {_DAMAGED_HINT}") from None


def read_checkpoint_config(path: str | os.PathLike) -> dict:
    """Read and check ``CKPT/config.json``; errors say what is wrong and what to do. (The files' checksums
    are verified by `load_checkpoint`, resume and ``inspect``: `verify_checkpoint`.)"""
    path = local_path(path, what="the checkpoint")
    if not path.exists():
        raise FileNotFoundError(f"checkpoint {path} does not exist{interrupted_save_hint(path)}")
    if not path.is_dir():
        raise NotADirectoryError(
            f"checkpoint {path} is not a directory: give the directory written by `tokembed train --out`"
        )
    cfg_path = path / "config.json"
    if not cfg_path.exists():
        raise FileNotFoundError(
            f"{path} is not a tokembed checkpoint: it has no config.json (a directory written by `tokembed train --out` has)"
        )
    try:
        return _parse_config(cfg_path)
    except ValueError:
        _explain(path)  # a damaged file is the better explanation, when the checksums show one
        raise


def _parse_config(cfg_path: Path) -> dict:
    try:
        config = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{cfg_path} is not valid JSON ({e}); the checkpoint is damaged") from None
    if not isinstance(config, dict) or config.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(
            f"{cfg_path} is not a tokembed checkpoint config (format {config.get('format') if isinstance(config, dict) else None!r}, expected {CHECKPOINT_FORMAT!r})"
        )
    if config.get("version") != CHECKPOINT_VERSION:
        raise ValueError(
            f"{cfg_path.parent} has checkpoint version {config.get('version')!r}; this tokembed reads version {CHECKPOINT_VERSION}: upgrade tokembed"
        )
    return config


def load_checkpoint(
    path: str | os.PathLike, *, map_location: str | torch.device = "cpu", allow_unverified: bool = False
) -> tuple[GPT, dict]:
    """Load a checkpoint written by ``tokembed train``, verified first (`verify_checkpoint`): whatever is
    wrong, the damaged file is the one named.

    Args:
        allow_unverified: load a checkpoint that has no sha256.json (written before tokembed 0.2).

    Returns:
        (model, config): the ``GPT`` with its weights (in eval mode) and the parsed ``config.json``. The
        model's ``tokenizer_record`` is the training data's tokenizer (``"gpt2"`` for checkpoints that predate
        the record), so ``EmbeddingTable.from_model(model)`` labels its rows with the right tokenizer.
    """
    path = Path(path)
    config = read_checkpoint_config(path)
    verify_checkpoint(path, allow_unverified=allow_unverified)
    if not (path / "model.safetensors").exists():
        raise FileNotFoundError(f"checkpoint {path} has no model.safetensors; the checkpoint is incomplete")
    state = read_checkpoint_file(path, "model.safetensors", lambda p: read_safetensors(p, device=str(map_location)))
    try:
        model = GPT(GPTConfig.from_dict(config["model"]))
        missing, unexpected = model.load_state_dict(state, strict=False)
    except (ValueError, TypeError, KeyError, RuntimeError) as e:
        raise ValueError(f"checkpoint {path} does not match its config ({str(e).splitlines()[0]})") from None
    if model.config.tie_embeddings:
        missing = [k for k in missing if k != "head.weight"]  # the token table, shared
    if missing or unexpected:
        raise ValueError(
            f"checkpoint {path} does not match its config: missing weights {missing}, unexpected weights {unexpected}"
        )
    model.to(map_location)
    model.eval()
    model.tokenizer_record = config.get("tokenizer_record") or config.get("tokenizer", "gpt2")
    return model, config
