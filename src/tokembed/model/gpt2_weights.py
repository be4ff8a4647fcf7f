"""GPT-2's own token and position tables (``wte``, ``wpe``), read from a local file, never downloaded.

Three layouts are understood, found by their keys rather than by file names:

* Hugging Face ``GPT2Model`` / ``GPT2LMHeadModel``: ``wte.weight`` and ``wpe.weight``, possibly
  prefixed ``transformer.`` (the LM-head model), in ``model.safetensors`` or ``pytorch_model.bin``.
* The book's ``GPTModel`` (``torch.save(model.state_dict(), "model.pth")``): ``tok_emb.weight`` and
  ``pos_emb.weight``; also inside ``{"model_state_dict": ...}`` as the book saves model and optimizer.
* Prefixes that wrappers add are stripped first: ``module.`` (DistributedDataParallel) and
  ``_orig_mod.`` (``torch.compile``); a state dict nested under ``"model_state_dict"`` (the book),
  ``"state_dict"`` (Lightning) or ``"model"`` (nanoGPT's ``ckpt.pt``) is found.

Only the two tables are read: from a safetensors file the other tensors are never loaded, and a
torch file is memory-mapped where its format allows it. TensorFlow checkpoints (OpenAI's original
``model.ckpt``) are not read: convert them with Hugging Face ``transformers`` first.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import torch

from tokembed.tokenizer.gpt2 import GPT2_N_VOCAB

__all__ = ["GPT2_VOCAB_SIZE", "find_gpt2_file", "load_gpt2_embeddings"]

GPT2_VOCAB_SIZE = GPT2_N_VOCAB  # 50,000 BPE merges + 256 byte tokens + <|endoftext|>

# (token-table key, position-table key) per layout, after wrapper prefixes are stripped.
_LAYOUTS = {
    "Hugging Face GPT2Model": ("wte.weight", "wpe.weight"),
    "Hugging Face GPT2LMHeadModel": ("transformer.wte.weight", "transformer.wpe.weight"),
    "book GPTModel": ("tok_emb.weight", "pos_emb.weight"),
}
_WRAPPER_PREFIXES = ("module.", "_orig_mod.")
_NESTED_STATE_KEYS = ("model_state_dict", "state_dict", "model")
# Files looked for, in this order, when a directory is given.
_DIR_CANDIDATES = ("model.safetensors", "pytorch_model.bin", "model.pth", "model.pt")


def find_gpt2_file(path: str | Path) -> Path:
    """Return the weights file to read: ``path`` itself, or the first known file inside a directory."""
    path = Path(path)
    if path.is_dir():
        for name in _DIR_CANDIDATES:
            if (path / name).is_file():
                return path / name
        raise FileNotFoundError(
            f"{path} is a directory without GPT-2 weights: looked for {', '.join(_DIR_CANDIDATES)}; "
            "pass the weights file itself, or download GPT-2 once elsewhere and copy it here"
        )
    if not path.exists():
        raise FileNotFoundError(
            f"GPT-2 weights file {path} does not exist; pass a local model.safetensors, pytorch_model.bin or the book's model.pth"
        )
    return path


def _strip_wrappers(key: str) -> str:
    changed = True
    while changed:
        changed = False
        for prefix in _WRAPPER_PREFIXES:
            if key.startswith(prefix):
                key, changed = key[len(prefix) :], True
    return key


def _pick_keys(keys: list[str], path: Path) -> tuple[str, str]:
    """The original (unstripped) keys of the token and position tables."""
    stripped = {_strip_wrappers(k): k for k in keys}
    for tok, pos in _LAYOUTS.values():
        if tok in stripped and pos in stripped:
            return stripped[tok], stripped[pos]
    shown = ", ".join(sorted(keys)[:12]) + (f", ... ({len(keys)} keys)" if len(keys) > 12 else "")
    wanted = "; ".join(f"{name}: {tok!r} + {pos!r}" for name, (tok, pos) in _LAYOUTS.items())
    raise ValueError(
        f"{path} has no GPT-2 embedding tables: expected one of [{wanted}], found keys [{shown or 'none'}]"
    )


def _read_safetensors(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            tok_key, pos_key = _pick_keys(list(f.keys()), path)
            return f.get_tensor(tok_key), f.get_tensor(pos_key)
    except SafetensorError as e:
        raise ValueError(f"{path} is not a readable safetensors file ({e}); is it a complete download?") from e


def _read_torch(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    mmap = zipfile.is_zipfile(path)  # torch.save's default format since 1.6 can be memory-mapped
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as e:  # torch raises many types (UnpicklingError, RuntimeError, EOFError, ...)
        raise ValueError(
            f"{path} is not a PyTorch checkpoint that can be loaded safely ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
            "expected a state dict saved with torch.save"
        ) from e
    if isinstance(obj, dict):
        # the book's {"model_state_dict": ..., "optimizer_state_dict": ...}, Lightning's "state_dict", nanoGPT's "model"
        for nest in _NESTED_STATE_KEYS:
            if isinstance(obj.get(nest), dict):
                obj = obj[nest]
                break
    if not isinstance(obj, dict):
        raise ValueError(
            f"{path} holds a {type(obj).__name__}, not a state dict; save the weights with torch.save(model.state_dict(), path)"
        )
    tensors = {k: v for k, v in obj.items() if isinstance(k, str) and isinstance(v, torch.Tensor)}
    tok_key, pos_key = _pick_keys(list(tensors), path)
    return tensors[tok_key], tensors[pos_key]


def _looks_like_safetensors(path: Path) -> bool:
    # A safetensors file starts with the header's length (u64, little-endian) then the JSON header.
    with open(path, "rb") as fh:
        head = fh.read(9)
    return len(head) == 9 and head[8:9] == b"{"


def load_gpt2_embeddings(path: str | Path) -> dict[str, torch.Tensor]:
    """Read GPT-2's token and position tables from a local checkpoint.

    Args:
        path: a ``model.safetensors``, a ``pytorch_model.bin`` or the book's ``model.pth``, or a
            directory holding one of them (a Hugging Face snapshot folder).

    Returns:
        ``{"wte": (GPT2_VOCAB_SIZE, D) float32, "wpe": (P, D) float32}``; GPT-2 has P = 1024 and D = 768
        (small), 1024 (medium), 1280 (large) or 1600 (XL). Half-precision weights are converted.

    Raises:
        FileNotFoundError: nothing at ``path``.
        ValueError: the file is not a checkpoint, lacks the tables, or their shapes are not GPT-2's.
    """
    file = find_gpt2_file(path)
    if file.suffix == ".safetensors" or _looks_like_safetensors(file):
        wte, wpe = _read_safetensors(file)
    else:
        wte, wpe = _read_torch(file)
    if wte.ndim != 2 or wpe.ndim != 2:
        raise ValueError(
            f"{file}: the token table has shape {tuple(wte.shape)} and the position table {tuple(wpe.shape)}; both must be 2-D (rows, dim)"
        )
    if wte.shape[0] != GPT2_VOCAB_SIZE:
        raise ValueError(
            f"{file}: the token table has shape {tuple(wte.shape)}, but GPT-2's has {GPT2_VOCAB_SIZE} rows (one per BPE token); "
            "this is not a GPT-2 checkpoint (or it was trained with another tokenizer)"
        )
    if wpe.shape[1] != wte.shape[1]:
        raise ValueError(
            f"{file}: the token table has shape {tuple(wte.shape)} but the position table {tuple(wpe.shape)}; their widths (dim) must be equal"
        )
    if not (wte.dtype.is_floating_point and wpe.dtype.is_floating_point):
        raise ValueError(f"{file}: the tables have dtypes {wte.dtype} and {wpe.dtype}; expected floating point")
    return {"wte": wte.to(torch.float32).contiguous(), "wpe": wpe.to(torch.float32).contiguous()}
