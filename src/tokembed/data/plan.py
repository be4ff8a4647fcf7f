"""The chapter's window arithmetic, and how an epoch of windows is dealt out to ranks (torch-free).

Every loader follows these formulas, so `tokembed stats` can say what a run will read before it runs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from tokembed._checks import check_int, check_positive_int

__all__ = ["Plan", "RankPlan", "add_rank_plans", "plan", "rank_plan", "window_count"]


def window_count(n_tokens: int, max_length: int, stride: int) -> int:
    """The number of windows the chapter takes: ``len(range(0, n_tokens - max_length, stride))``."""
    return max(0, -(-(n_tokens - max_length) // stride))


@dataclass(frozen=True)
class Plan:
    """How a token stream is cut into sliding windows and batches (the chapter's arithmetic).

    Attributes:
        n_tokens: tokens in the stream.
        max_length: window length ``L``.
        stride: step between window starts.
        batch_size: windows per batch.
        drop_last: whether a last partial batch is dropped (the book's default).
        windows: ``window_count(n_tokens, max_length, stride)`` = ``len(range(0, n_tokens - L, stride))``.
        batches: batches per epoch.
        dropped_windows: windows in the dropped partial batch (0 without ``drop_last``).
        tail_tokens: tokens after the last window's last target that no window reads.
    """

    n_tokens: int
    max_length: int
    stride: int
    batch_size: int
    drop_last: bool
    windows: int
    batches: int
    dropped_windows: int
    tail_tokens: int

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def plan(n_tokens: int, *, max_length: int, stride: int, batch_size: int, drop_last: bool = True) -> Plan:
    """Windows, batches per epoch and dropped tail for a stream of ``n_tokens`` tokens.

    Uses `window_count`, the same arithmetic as the loaders, so the numbers agree.
    """
    for name, value in (("max_length", max_length), ("stride", stride), ("batch_size", batch_size)):
        check_int(name, value, min=1, noun="an integer")
    if n_tokens < 0:
        raise ValueError(f"n_tokens must be >= 0, got {n_tokens}")
    windows = int(window_count(int(n_tokens), int(max_length), int(stride)))
    batches, rest = divmod(windows, batch_size)
    if not drop_last and rest:
        batches, rest = batches + 1, 0
    # The last window starts at (windows-1)*stride and its targets end at start + max_length + 1.
    covered = (windows - 1) * stride + max_length + 1 if windows else 0
    return Plan(
        n_tokens=int(n_tokens),
        max_length=int(max_length),
        stride=int(stride),
        batch_size=int(batch_size),
        drop_last=drop_last,
        windows=windows,
        batches=batches,
        dropped_windows=rest,
        tail_tokens=int(n_tokens) - covered if windows else int(n_tokens),
    )


@dataclass(frozen=True)
class RankPlan:
    """How one epoch of ``windows`` is cut into batches for each of ``world_size`` ranks.

    Attributes:
        windows: windows in the epoch (``N``).
        batch_size: windows per full batch (``B``).
        world_size: ranks (``W``).
        drop_last: drop the tail (< W*B windows) instead of sharing it out.
        batches: batches per rank per epoch (the same on every rank).
        full_steps: steps where each rank gets a full batch, ``N // (W*B)``.
        last_batch_size: windows in each rank's last batch (``B`` unless the tail is shared out).
        dropped_windows: windows of the epoch no rank sees (``drop_last=True``).
        padded_windows: windows seen twice to even out the ranks' last batches (``drop_last=False``).
    """

    windows: int
    batch_size: int
    world_size: int
    drop_last: bool
    batches: int
    full_steps: int
    last_batch_size: int
    dropped_windows: int
    padded_windows: int

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def rank_plan(windows: int, *, batch_size: int, world_size: int = 1, drop_last: bool = True) -> RankPlan:
    """Batches per rank for an epoch of ``windows`` windows: the arithmetic the loader follows."""
    batch_size = check_positive_int("batch_size", batch_size)
    world_size = check_positive_int("world_size", world_size)
    step = batch_size * world_size
    full, tail = divmod(int(windows), step)
    if drop_last or tail == 0:
        return RankPlan(windows, batch_size, world_size, drop_last, full, full, batch_size if full else 0, tail, 0)
    share = -(-tail // world_size)  # ceil: every rank's last batch has the same size
    return RankPlan(windows, batch_size, world_size, drop_last, full + 1, full, share, 0, share * world_size - tail)


def add_rank_plans(stats: dict[str, Any], *, world_size: int) -> dict[str, Any]:
    """Add ``"rank_plan"`` (a `RankPlan` dict) to each split of ``tokembed.shards.shard_stats``'s result.

    ``tokembed stats --world-size`` prints it: the batches each rank's `create_dataloader` yields.
    """
    world_size = check_positive_int("world_size", world_size, hint="the number of ranks (processes) sharing each epoch")
    for split in stats["splits"].values():
        pl = split.get("plan")
        if pl is not None:
            split["rank_plan"] = rank_plan(
                pl["windows"], batch_size=pl["batch_size"], world_size=world_size, drop_last=pl["drop_last"]
            ).to_dict()
    return stats
