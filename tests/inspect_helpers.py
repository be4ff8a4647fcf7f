"""Tables and checkpoints that the inspection, export and report tests write themselves (no download)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from safetensors.torch import save_file

V = 50257  # GPT-2's vocabulary: the tables are labelled by the real tokenizer
ANALOGY = (" king", " man", " woman", " queen")  # GPT-2 ids 5822, 582, 2415, 16599


def planted_table(dim: int = 16, *, seed: int = 0) -> torch.Tensor:
    """(V, dim) random rows, with " queen" = " king" - " man" + " woman" planted (unit-norm inputs)."""
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(V, dim, generator=g)
    king, man, woman, queen = 5822, 582, 2415, 16599
    for i in (king, man, woman):
        t[i] = t[i] / t[i].norm() * 3.0
    t[queen] = t[king] - t[man] + t[woman]
    return t


def write_checkpoint(
    path: Path,
    tokens: torch.Tensor,
    *,
    positional: str = "learned",
    context_length: int = 64,
    positions: torch.Tensor | None = None,
    log: bool = True,
    data: str | None = None,
) -> Path:
    """A checkpoint directory in the layout `tokembed train` writes (config.json, model.safetensors, log.json,
    and token_counts.safetensors when ``data`` is given: the counts of that text; sha256.json of them all)."""
    path.mkdir(parents=True)
    dim = tokens.shape[1]
    state = {
        "embed.token.weight": tokens.contiguous(),
        "blocks.0.attn.qkv.weight": torch.randn(3 * dim, dim),
        "norm.weight": torch.ones(dim),
    }
    if positional == "learned":
        state["embed.position.weight"] = positions if positions is not None else torch.randn(context_length, dim)
    save_file(state, str(path / "model.safetensors"), metadata={"format": "pt"})
    config = {
        "format": "tokembed-checkpoint",
        "version": 1,
        "model": {
            "vocab_size": tokens.shape[0],
            "context_length": context_length,
            "dim": dim,
            "n_layers": 1,
            "n_heads": 2,
            "dropout": 0.0,
            "positional": positional,
            "tie_embeddings": True,
        },
        "tokenizer": "gpt2",
        "train": {"data": data, "batch_size": 4, "lr": 4e-4},
        "step": 120,
        "tokens_seen": 61440,
    }
    (path / "config.json").write_text(json.dumps(config))
    if data is not None:  # `tokembed train` records the ids it read: here, those of the whole text
        from tokembed import token_counts

        save_file({"counts": token_counts(data)}, str(path / "token_counts.safetensors"))
    if log:
        train = [
            {"step": s, "tokens": 512 * s, "loss": 10.0 * 0.97**s, "lr": 4e-4, "tokens_per_s": 1000.0}
            for s in range(1, 121)
        ]
        val = [{"step": s, "loss": 10.5 * 0.97**s} for s in range(20, 121, 20)]
        (path / "log.json").write_text(json.dumps({"train": train, "val": val}))
    seal(path)
    return path


def seal(path: Path) -> None:
    """Write sha256.json as the checkpoint format defines it (tokembed.model.checkpoint's docstring)."""
    files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.iterdir()) if p.is_file()}
    files.pop("sha256.json", None)
    listing = hashlib.sha256(json.dumps(files, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    (path / "sha256.json").write_text(json.dumps({"format": "tokembed-checksums", "files": files, "sha256": listing}))


def gpt2_state(dim: int = 8, *, seed: int = 1, n_positions: int = 1024) -> dict[str, torch.Tensor]:
    """A tiny GPT-2 state dict in Hugging Face's GPT2Model naming: real table shapes, narrow width."""
    g = torch.Generator().manual_seed(seed)
    return {
        "wte.weight": torch.randn(V, dim, generator=g) * 0.1,
        "wpe.weight": torch.randn(n_positions, dim, generator=g) * 0.01,
        "h.0.ln_1.weight": torch.ones(dim),
        "h.0.attn.c_attn.weight": torch.randn(dim, 3 * dim, generator=g),
        "ln_f.weight": torch.ones(dim),
    }


SCHEMES = ("learned", "sinusoidal", "rope", "alibi", "t5", "shaw", "none")


def tiny_run(path: Path, positional: str, data: str) -> Path:
    """A real two-step `tokembed train` run of a tiny model (counts, isotropy log, loss.png, positional weights)."""
    from tokembed import GPTConfig, TrainConfig, train

    config = TrainConfig(data=data, out=str(path), max_length=16, batch_size=4, max_steps=2, checkpoint_interval=1)
    model = GPTConfig(context_length=16, dim=16, n_layers=2, n_heads=2, positional=positional)
    train(config, model, progress=False)
    return path
