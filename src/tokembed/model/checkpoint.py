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
    CKPT/sha256.json          {file name: sha256} of every file above, written last

Saving writes everything into ``CKPT.tmp-XXXX/`` beside ``CKPT``, fsyncs each file, then swaps the
directories with two renames; the previous checkpoint is deleted only once the new one is in
place. If the process dies between the two renames, ``CKPT.old-XXXX`` is the previous complete
checkpoint and ``load_checkpoint`` says so. Folders and files get the modes ``open`` gives (the umask).

Reading verifies every file against ``sha256.json`` (`verify_checkpoint`: ``load_checkpoint`` and so
``eval``, ``inspect`` and ``report``, and ``--resume``), so a flipped bit anywhere is an error naming
the file, never a silently different model. Checkpoints written before ``sha256.json``
existed are read unverified; a file that cannot be parsed is named all the same (`read_checkpoint_file`).
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import pickle
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from tokembed._atomic import fsync_dir
from tokembed._plot import write_loss_png
from tokembed.model.config import GPTConfig
from tokembed.model.gpt import GPT

__all__ = [
    "CHECKPOINT_FORMAT",
    "CHECKPOINT_VERSION",
    "load_checkpoint",
    "read_checkpoint_config",
    "read_checkpoint_file",
    "save_checkpoint",
    "verify_checkpoint",
]

CHECKPOINT_FORMAT = "tokembed-checkpoint"
CHECKPOINT_VERSION = 1
CHECKSUMS = "sha256.json"


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
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_saves(path)
    tmp = Path(tempfile.mkdtemp(prefix=f"{path.name}.tmp-", dir=path.parent))
    try:
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
        sums = {p.name: _sha256(p) for p in sorted(tmp.iterdir()) if p.is_file()}
        _write_json(tmp / CHECKSUMS, sums)  # last: it vouches for every file before it
        fsync_dir(tmp)
        _swap_in(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def _write_contents(tmp: Path, model: GPT, *, train, step, tokens_seen, optimizer, state, log, tokenizer) -> None:
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
    """Delete what killed saves left beside ``path``: ``CKPT.tmp-*`` (never complete), and ``CKPT.old-*`` once
    ``path`` exists (the swap finished; without ``path``, an ``.old`` folder is the last checkpoint: kept)."""
    stale = list(path.parent.glob(f"{glob.escape(path.name)}.tmp-*"))
    if path.is_dir():
        stale += path.parent.glob(f"{glob.escape(path.name)}.old-*")
    for p in stale:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)


def _to_cpu(obj):
    """A state dict with every tensor on the CPU (a checkpoint written on a GPU resumes on a CPU)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_cpu(v) for v in obj)
    return obj


def _swap_in(tmp: Path, path: Path) -> None:
    """Rename the finished ``tmp`` folder to ``path``; an existing ``path`` is removed only once replaced."""
    if path.exists():
        old = Path(tempfile.mkdtemp(prefix=f"{path.name}.old-", dir=path.parent))
        os.replace(path, old / "ckpt")  # keep the previous checkpoint until the new one is in place
        os.replace(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, path)
    fsync_dir(path.parent)


def interrupted_save_hint(path: Path) -> str:
    """For a missing checkpoint ``path``: where the previous one is when a save was killed between its renames."""
    olds = (
        sorted(p for p in path.parent.glob(f"{glob.escape(path.name)}.old-*/ckpt") if (p / "config.json").exists())
        if path.parent.exists()
        else []
    )
    return f"; a save was interrupted: the previous checkpoint is {olds[-1]} (move it to {path})" if olds else ""


def verify_checkpoint(path: str | os.PathLike) -> bool:
    """Check every file of checkpoint ``path`` against its ``sha256.json``.

    Returns:
        True when verified; False for a checkpoint written before checksums existed (nothing to verify).

    Raises:
        ValueError: a file is damaged or missing, or ``sha256.json`` itself is; the message names the file.
    """
    path = Path(path)
    if not (path / CHECKSUMS).is_file():
        return False
    sums = read_checkpoint_file(path, CHECKSUMS, lambda p: json.loads(p.read_text(encoding="utf-8")))
    if not isinstance(sums, dict):
        raise ValueError(f"checkpoint file {path / CHECKSUMS} is damaged (not a JSON object); {_DAMAGED_HINT}")
    for name, digest in sums.items():
        p = path / str(name)
        if not p.is_file() or "/" in str(name):
            raise ValueError(f"checkpoint file {p} is missing; {_DAMAGED_HINT}")
        if _sha256(p) != digest:
            raise ValueError(
                f"checkpoint file {p} is damaged (its sha256 differs from the one saved with it); {_DAMAGED_HINT}"
            )
    return True


_DAMAGED_HINT = "restore the checkpoint from a copy, or train again into a new --out"


def read_checkpoint_file(path: Path, name: str, reader: Callable[[Path], Any]) -> Any:
    """``reader(path / name)``, with any failure to parse the file reported as one ValueError naming it
    (instead of a SafetensorError, a pickle or JSON error from deep inside)."""
    from safetensors import SafetensorError

    p = Path(path) / name
    if not p.is_file():
        raise FileNotFoundError(f"checkpoint file {p} is missing; the checkpoint is incomplete")
    try:
        return reader(p)
    except (ValueError, RuntimeError, EOFError, KeyError, TypeError, pickle.UnpicklingError, SafetensorError) as e:
        why = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        raise ValueError(f"checkpoint file {p} is damaged ({why}); {_DAMAGED_HINT}") from None


def read_checkpoint_config(path: str | os.PathLike) -> dict:
    """Read and check ``CKPT/config.json``; errors say what is wrong and what to do. (The files' checksums
    are verified by `load_checkpoint`, resume and ``inspect``: `verify_checkpoint`.)"""
    path = Path(path)
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
        verify_checkpoint(path)  # a damaged file is the better explanation, when the checksums show one
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


def load_checkpoint(path: str | os.PathLike, *, map_location: str | torch.device = "cpu") -> tuple[GPT, dict]:
    """Load a checkpoint written by ``tokembed train``.

    Returns:
        (model, config): the ``GPT`` with its weights (in eval mode) and the parsed ``config.json``. The
        model's ``tokenizer_record`` is the training data's tokenizer (``"gpt2"`` for checkpoints that predate
        the record), so ``EmbeddingTable.from_model(model)`` labels its rows with the right tokenizer.
    """
    path = Path(path)
    config = read_checkpoint_config(path)
    if not (path / "model.safetensors").exists():
        raise FileNotFoundError(f"checkpoint {path} has no model.safetensors; the checkpoint is incomplete")
    state = read_checkpoint_file(path, "model.safetensors", lambda p: load_file(str(p), device=str(map_location)))
    try:
        model = GPT(GPTConfig.from_dict(config["model"]))
        missing, unexpected = model.load_state_dict(state, strict=False)
    except (ValueError, TypeError, KeyError, RuntimeError) as e:
        verify_checkpoint(path)  # a damaged file explains a mismatch best: named first
        raise ValueError(f"checkpoint {path} does not match its config ({str(e).splitlines()[0]})") from None
    if model.config.tie_embeddings:
        missing = [k for k in missing if k != "head.weight"]  # the token table, shared
    if missing or unexpected:
        raise ValueError(
            f"checkpoint {path} does not match its config: missing weights {missing}, unexpected weights {unexpected}"
        )
    verify_checkpoint(path)  # the weights load; still, not one bit may differ from what was saved
    model.to(map_location)
    model.eval()
    model.tokenizer_record = config.get("tokenizer_record") or config.get("tokenizer", "gpt2")
    return model, config
