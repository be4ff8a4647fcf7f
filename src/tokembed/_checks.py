"""Argument checks shared by every stage: each names the bad value and says what to do."""

from __future__ import annotations

import dataclasses
import numbers
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where a tensor is checked: the other checks serve torch-free modules
    import torch


def check_positive_int(name: str, value: object, *, hint: str = "") -> int:
    """Return ``value`` if it is an int >= 1, else raise naming it."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer >= 1, got {value!r} ({type(value).__name__})")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}" + (f"; {hint}" if hint else ""))
    return int(value)


def check_probability(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be a float in [0, 1), got {value!r}")
    return float(value)


def check_index_tensor(name: str, ids: object, size: int, *, what: str) -> torch.Tensor:
    """Check that ``ids`` is an integer tensor with every value in [0, size).

    Args:
        name: what the ids are called in messages ("token id", "position").
        ids: the tensor to check.
        size: the number of rows of the table the ids index.
        what: the table, for messages ("the vocabulary", "the context length").
    """
    import torch

    if not isinstance(ids, torch.Tensor):
        raise TypeError(f"{name}s must be a torch.Tensor of integers, got {type(ids).__name__}; wrap them with torch.tensor(...)")
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise TypeError(f"{name}s must be an integer tensor (torch.long), got dtype {ids.dtype}; convert with .long()")
    if ids.numel():
        lo, hi = torch.aminmax(ids)
        if lo.item() < 0 or hi.item() >= size:
            bad = lo.item() if lo.item() < 0 else hi.item()
            raise ValueError(f"{name} {bad} is outside {what} (size {size}): valid values are 0..{size - 1}")
    return ids


def config_from_dict(cls, d: dict):
    """Build the dataclass ``cls`` from ``d`` (e.g. a checkpoint's ``config.json``), naming unknown keys."""
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - known)
    if unknown:
        raise ValueError(f"unknown {cls.__name__} fields {unknown}; known fields: {sorted(known)}")
    return cls(**d)
