"""What exact resume needs besides the weights and the optimizer: step, tokens, epoch, log, loader, RNG."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from tokembed.model.checkpoint import read_checkpoint_file, read_safetensors

__all__ = ["TrainState"]


@dataclass
class TrainState:
    """The progress of a run, as ``state.json`` and ``log.json`` of its checkpoint store it.

    Attributes:
        step: optimizer steps done.
        tokens_seen: training tokens read so far.
        epoch: the loader's epoch.
        log: ``{"train": [{"step", "tokens", "loss", "lr", "tokens_per_s"}, ...], "val": [{"step", "loss"}, ...],
            "isotropy": [{"step", "all", "trained"}, ...]}`` (isotropy of the token table at each checkpoint).
    """

    step: int = 0
    tokens_seen: int = 0
    epoch: int = 0
    log: dict = field(default_factory=lambda: {"train": [], "val": []})

    def last_loss(self, kind: str) -> float | None:
        """The last logged ``"train"`` or ``"val"`` loss, or None."""
        return self.log[kind][-1]["loss"] if self.log[kind] else None

    def to_dict(self, loader, *, data: dict | None = None) -> dict:
        """``state.json``'s content: this state, the loader's position, torch's RNG, and ``data``: what the
        run reads, by content (`tokembed.training.data.data_identity`), which a resume must find again."""
        return {
            "step": self.step,
            "tokens_seen": self.tokens_seen,
            "epoch": self.epoch,
            "loader": _jsonable(loader.state_dict()),
            "rng": _rng_state(),
            **({"cuda_rng": _cuda_rng_state()} if torch.cuda.is_available() and torch.cuda.is_initialized() else {}),
            **({"data": data} if data is not None else {}),
        }

    def restore(self, out: Path, model, optimizer, loader) -> None:
        """Load the checkpoint in ``out`` into ``model``, ``optimizer``, ``loader``, torch's RNG and this state."""
        weights = read_checkpoint_file(out, "model.safetensors", read_safetensors)
        model.load_state_dict(weights, strict=not model.config.tie_embeddings)
        optimizer.load_state_dict(
            read_checkpoint_file(out, "optimizer.pt", lambda p: torch.load(p, weights_only=True, map_location="cpu"))
        )
        self.log = read_checkpoint_file(out, "log.json", _read_json)
        state = read_checkpoint_file(out, "state.json", _read_state)
        self.step, self.tokens_seen, self.epoch = state["step"], state["tokens_seen"], state["epoch"]
        loader.set_epoch(self.epoch)
        loader.load_state_dict(state["loader"])
        _set_rng_state(state["rng"])
        if "cuda_rng" in state and torch.cuda.is_available():  # dropout on a GPU draws from its own generator
            torch.cuda.set_rng_state(_from_b64(state["cuda_rng"]))


def _read_state(p: Path) -> dict:
    """``state.json``, with every key resume needs (a missing one is damage, named by the caller)."""
    state = _read_json(p)
    missing = [k for k in ("step", "tokens_seen", "epoch", "loader", "rng") if k not in state]
    if missing:
        raise ValueError(f"it lacks {', '.join(missing)}")
    return state


def _read_json(p: Path):
    return json.loads(p.read_text(encoding="utf-8"))


def _rng_state() -> str:
    return base64.b64encode(torch.get_rng_state().numpy().tobytes()).decode("ascii")


def _cuda_rng_state() -> str:
    return base64.b64encode(torch.cuda.get_rng_state().numpy().tobytes()).decode("ascii")


def _from_b64(s: str) -> torch.Tensor:
    return torch.from_numpy(np.frombuffer(base64.b64decode(s), dtype=np.uint8).copy())


def _set_rng_state(s: str) -> None:
    torch.set_rng_state(_from_b64(s))


def _jsonable(obj):
    """Loader states may hold numpy scalars/arrays or tensors: make them JSON."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, torch.Tensor):
        return obj.tolist()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    return obj
