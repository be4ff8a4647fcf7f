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

Saving writes everything into ``CKPT.tmp-XXXX/`` beside ``CKPT``, fsyncs each file, then swaps the
directories with two renames; the previous checkpoint is deleted only once the new one is in
place. If the process dies between the two renames, ``CKPT.old-XXXX`` is the previous complete
checkpoint and ``load_checkpoint`` says so.
"""

from __future__ import annotations

import json
import os
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

__all__ = ["CHECKPOINT_FORMAT", "CHECKPOINT_VERSION", "load_checkpoint", "read_checkpoint_config", "save_checkpoint"]

CHECKPOINT_FORMAT = "tokembed-checkpoint"
CHECKPOINT_VERSION = 1


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
    tmp = Path(tempfile.mkdtemp(prefix=f"{path.name}.tmp-", dir=path.parent))
    try:
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


def read_checkpoint_config(path: str | os.PathLike) -> dict:
    """Read and check ``CKPT/config.json``; errors say what is wrong and what to do."""
    path = Path(path)
    if not path.exists():
        olds = (
            sorted(p for p in path.parent.glob(f"{path.name}.old-*/ckpt") if (p / "config.json").exists())
            if path.parent.exists()
            else []
        )
        hint = f"; a save was interrupted: the previous checkpoint is {olds[-1]} (move it to {path})" if olds else ""
        raise FileNotFoundError(f"checkpoint {path} does not exist{hint}")
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
        config = json.loads(cfg_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{cfg_path} is not valid JSON ({e}); the checkpoint is damaged") from None
    if not isinstance(config, dict) or config.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(
            f"{cfg_path} is not a tokembed checkpoint config (format {config.get('format') if isinstance(config, dict) else None!r}, expected {CHECKPOINT_FORMAT!r})"
        )
    if config.get("version") != CHECKPOINT_VERSION:
        raise ValueError(
            f"{path} has checkpoint version {config.get('version')!r}; this tokembed reads version {CHECKPOINT_VERSION}: upgrade tokembed"
        )
    return config


def load_checkpoint(path: str | os.PathLike, *, map_location: str | torch.device = "cpu") -> tuple[GPT, dict]:
    """Load a checkpoint written by ``tokembed train``.

    Returns:
        (model, config): the ``GPT`` with its weights (in eval mode) and the parsed ``config.json``.
    """
    path = Path(path)
    config = read_checkpoint_config(path)
    model = GPT(GPTConfig.from_dict(config["model"]))
    weights = path / "model.safetensors"
    if not weights.exists():
        raise FileNotFoundError(f"checkpoint {path} has no model.safetensors; the checkpoint is incomplete")
    state = load_file(str(weights), device=str(map_location))
    missing, unexpected = model.load_state_dict(state, strict=False)
    if model.config.tie_embeddings:
        missing = [k for k in missing if k != "head.weight"]  # the token table, shared
    if missing or unexpected:
        raise ValueError(
            f"checkpoint {path} does not match its config: missing weights {missing}, unexpected weights {unexpected}"
        )
    model.to(map_location)
    model.eval()
    return model, config
