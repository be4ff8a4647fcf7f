"""Argument checks shared by every stage: each names the bad value and says what to do."""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where a tensor is checked: the other checks serve torch-free modules
    import torch


class ArgumentTypeError(TypeError, ValueError):
    """An argument of the wrong type (a str or a float where an int belongs, a bool where a number belongs).

    The rule for every check here: the wrong *type* raises this (a TypeError), a value of the right type
    outside its range raises ValueError. It is also a ValueError because tokembed 0.1 raised ValueError for
    some type mistakes: code that catches ValueError keeps working.
    """


def _describe(value: object) -> str:
    return f"{value!r} ({type(value).__name__})"


def _range_text(lo: float | None, hi: float | None, *, lo_open: bool = False, hi_open: bool = False) -> str:
    low, high = (None if x is None else f"{x:g}" if isinstance(x, float) else str(x) for x in (lo, hi))
    if low is not None and high is not None:
        return f"in {'(' if lo_open else '['}{low}, {high}{')' if hi_open else ']'}"
    if low is not None:
        return f"{'>' if lo_open else '>='} {low}"
    if high is not None:
        return f"{'<' if hi_open else '<='} {high}"
    return ""


def check_int(
    name: str, value: object, *, min: int | None = None, max: int | None = None, noun: str = "", hint: str = ""
) -> int:
    """Return ``value`` as an int if it is an integer (not a bool) in ``[min, max]``, else raise naming it.

    A wrong type is reported as "NAME must be an integer >= 1, got 2.5 (float)"; a wrong value as
    "NAME must be >= 1, got 0" (``noun``, e.g. ``"an integer"``, goes before the range when given).

    Raises:
        ArgumentTypeError: ``value`` is not an integer (a bool, a float, a str, ...).
        ValueError: ``value`` is outside ``[min, max]``.
    """
    bounds = _range_text(min, max)
    suffix = f"; {hint}" if hint else ""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ArgumentTypeError(
            f"{name} must be {' '.join(filter(None, ['an integer', bounds]))}, got {_describe(value)}{suffix}"
        )
    n = int(value)
    if (min is not None and n < min) or (max is not None and n > max):
        raise ValueError(f"{name} must be {' '.join(filter(None, [noun, bounds]))}, got {value}{suffix}")
    return n


def check_positive_int(name: str, value: object, *, hint: str = "") -> int:
    """`check_int` with ``min=1``: a count, a length, a size."""
    return check_int(name, value, min=1, hint=hint)


def check_number(
    name: str,
    value: object,
    *,
    min: float | None = None,
    max: float | None = None,
    min_open: bool = False,
    max_open: bool = False,
    noun: str = "a float",
    hint: str = "",
) -> float:
    """Return ``value`` as a float if it is a finite real number (not a bool) in its range, else raise naming it.

    ``min_open``/``max_open`` exclude the bound itself (``(0, 1)`` rather than ``[0, 1]``); ``noun`` is what
    messages call the value (``"a float"``; ``""`` for just the range: "lr must be > 0").

    Raises:
        ArgumentTypeError: ``value`` is not a real number.
        ValueError: ``value`` is NaN, infinite, or outside its range.
    """
    want = " ".join(filter(None, [noun, _range_text(min, max, lo_open=min_open, hi_open=max_open)]))
    suffix = f"; {hint}" if hint else ""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentTypeError(f"{name} must be {want}, got {_describe(value)}{suffix}")
    v = float(value)
    below = min is not None and (v <= min if min_open else v < min)
    above = max is not None and (v >= max if max_open else v > max)
    if not math.isfinite(v) or below or above:
        raise ValueError(f"{name} must be {want}, got {value!r}{suffix}")
    return v


def check_probability(name: str, value: object) -> float:
    """A dropout-like probability in [0, 1)."""
    return check_number(name, value, min=0.0, max=1.0, max_open=True)


def check_bool(name: str, value: object) -> bool:
    """Return ``value`` if it is a bool; ``"no"``, ``0`` or ``"False"`` are refused, not taken as truth values."""
    if not isinstance(value, bool):
        raise ArgumentTypeError(f"{name} must be True or False, got {_describe(value)}")
    return value


def check_index_tensor(name: str, ids: object, size: int, *, what: str) -> torch.Tensor:
    """Check that ``ids`` is an integer tensor with every value in [0, size); return it as int32/int64.

    Every integer dtype is accepted (uint16 is the shards' own): the narrow and unsigned ones are widened
    to int64, which is what ``nn.Embedding`` and ``cross_entropy`` take.

    Args:
        name: what the ids are called in messages ("token id", "position").
        ids: the tensor to check.
        size: the number of rows of the table the ids index.
        what: the table, for messages ("the vocabulary", "the context length").
    """
    import torch

    if not isinstance(ids, torch.Tensor):
        raise TypeError(
            f"{name}s must be a torch.Tensor of integers, got {type(ids).__name__}; wrap them with torch.tensor(...)"
        )
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise TypeError(f"{name}s must be an integer tensor (torch.long), got dtype {ids.dtype}; convert with .long()")
    ids = long_ids(ids)
    if ids.numel():
        lo, hi = torch.aminmax(ids)
        if lo.item() < 0 or hi.item() >= size:
            bad = lo.item() if lo.item() < 0 else hi.item()
            raise ValueError(f"{name} {bad} is outside {what} (size {size}): valid values are 0..{size - 1}")
    return ids


def long_ids(ids: torch.Tensor) -> torch.Tensor:
    """``ids`` as an index tensor: int32 and int64 as they are, other integer dtypes widened to int64."""
    import torch

    if ids.dtype in (torch.int32, torch.int64) or ids.dtype.is_floating_point or ids.dtype == torch.bool:
        return ids
    return ids.to(torch.int64)  # (uint8, int8, int16, uint16, uint32, uint64: most torch ops lack the unsigned ones)


def config_from_dict(cls, d: dict):
    """Build the dataclass ``cls`` from ``d`` (e.g. a checkpoint's ``config.json``), naming unknown keys."""
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - known)
    if unknown:
        raise ValueError(f"unknown {cls.__name__} fields {unknown}; known fields: {sorted(known)}")
    return cls(**d)
