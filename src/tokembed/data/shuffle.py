"""A keyed permutation of ``0 .. N-1`` computed by formula: shuffling without an O(N) index."""

from __future__ import annotations

import numpy as np

__all__ = ["FeistelFamily", "FeistelPermutation", "GroupedPermutation"]


# splitmix64's constants: a cheap, well-mixing 64-bit hash for the Feistel round function.
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def _mix64(v: np.ndarray, key: np.uint64) -> np.ndarray:
    z = v + key + _GOLDEN  # uint64 arrays wrap around silently, as the hash wants
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


class FeistelPermutation:
    """A pseudo-random permutation of ``[0, n)`` evaluated by formula, O(1) memory.

    A keyed Feistel network is a bijection on ``[0, 2**b)`` for any round function (each round
    is invertible); ``2**b`` is the smallest power of two >= ``n``. Values that land at or past ``n``
    are sent through the network again (cycle walking) until they fall inside ``[0, n)``, which keeps
    it a bijection of ``[0, n)``; as ``2**b < 2n``, under two passes are needed on average.

    Args:
        n: the size of the domain.
        seed: any int >= 0; with ``epoch`` it selects the permutation.
        epoch: a new epoch, a new order.
        rounds: Feistel rounds. Four rounds of independent random functions make a strong pseudo-random
            permutation (Luby-Rackoff); here each round is a keyed 64-bit hash (splitmix64's finaliser),
            plenty for an epoch's order: consecutive positions look unrelated (tested).

    ``perm(positions)`` maps an int64 array of positions to window indices of the same shape.
    """

    def __init__(self, n: int, *, seed: int, epoch: int, rounds: int = 4) -> None:
        self.n = int(n)
        self.bits = max(1, (self.n - 1).bit_length())
        self.rounds = rounds
        self.keys = np.random.SeedSequence([int(seed), int(epoch), 0x7E5F]).generate_state(rounds, dtype=np.uint64)
        b = self.bits
        self._splits = [(b // 2) if r % 2 == 0 else b - b // 2 for r in range(rounds)]

    def _network(self, x: np.ndarray) -> np.ndarray:
        b = self.bits
        for s, key in zip(self._splits, self.keys):
            s64, rest = np.uint64(s), np.uint64(b - s)
            hi, lo = x >> s64, x & np.uint64((1 << s) - 1)
            f = _mix64(lo, key) & np.uint64((1 << (b - s)) - 1)
            x = (lo << rest) | (hi ^ f)  # the low part moves up, the high part is masked by a hash of it
        return x

    def __call__(self, positions: np.ndarray) -> np.ndarray:
        p = np.asarray(positions, dtype=np.int64)
        if self.n <= 1:
            return np.zeros_like(p)
        x = self._network(p.astype(np.uint64).ravel())
        out = x >= np.uint64(self.n)
        while out.any():  # cycle walking: at most a few passes over a shrinking subset
            idx = np.flatnonzero(out)
            x[idx] = self._network(x[idx])
            out[idx] = x[idx] >= np.uint64(self.n)
        return x.astype(np.int64).reshape(p.shape)


class FeistelFamily:
    """Several `FeistelPermutation`s evaluated in one vectorized pass: element ``i`` goes through ``perms[group[i]]``.

    The same network, element by element, with each element's own width, keys and domain, so the result
    equals ``perms[g](positions)`` for every group ``g`` (tested); a mixture evaluates the orders of all its
    sources' epochs in a block with one call instead of one per (source, epoch).
    """

    def __init__(self, perms: list[FeistelPermutation]) -> None:
        self.n = np.array([p.n for p in perms], dtype=np.uint64)  # (G,)
        self.bits = np.array([p.bits for p in perms], dtype=np.uint64)  # (G,)
        self.keys = np.stack([p.keys for p in perms])  # (G, rounds)
        self.splits = np.array([p._splits for p in perms], dtype=np.uint64)  # (G, rounds)

    def _network(self, x: np.ndarray, g: np.ndarray) -> np.ndarray:
        one, bits = np.uint64(1), self.bits[g]
        for r in range(self.keys.shape[1]):
            s = self.splits[g, r]
            rest = bits - s
            hi, lo = x >> s, x & ((one << s) - one)
            f = _mix64(lo, self.keys[g, r]) & ((one << rest) - one)
            x = (lo << rest) | (hi ^ f)  # as FeistelPermutation._network, with per-element widths and keys
        return x

    def __call__(self, positions: np.ndarray, group: np.ndarray) -> np.ndarray:
        """Window indices of ``positions`` (int64), each in the permutation ``group`` selects: same shape."""
        p = np.asarray(positions, dtype=np.int64).ravel()
        g = np.asarray(group, dtype=np.int64).ravel()
        n = self.n[g]
        x = np.zeros(len(p), dtype=np.uint64)  # a domain of one window: always 0 (as FeistelPermutation)
        live = np.flatnonzero(n > 1)
        x[live] = self._network(p[live].astype(np.uint64), g[live])
        out = np.zeros(len(p), dtype=bool)
        out[live] = x[live] >= n[live]
        while out.any():  # cycle walking, as FeistelPermutation
            idx = np.flatnonzero(out)
            x[idx] = self._network(x[idx], g[idx])
            out[idx] = x[idx] >= n[idx]
        return x.astype(np.int64).reshape(np.shape(positions))


class GroupedPermutation:
    """A permutation of ``[0, n)`` that keeps windows near each other in time: an order of groups, shuffled
    windows within each group (the loaders' ``shuffle_group``, for remote folders read through a small cache).

    The windows are cut into groups of ``group`` consecutive windows (the last group may be shorter). Positions
    visit the groups in a keyed random order (a `FeistelPermutation` of the groups), and each group's windows in
    a keyed random order of their own (one `FeistelPermutation` per group and epoch). It is a bijection of
    ``[0, n)`` (every window once per epoch) computed by formula from ``(seed, epoch)``, so exact and elastic
    resume hold as for the full shuffle. Consecutive windows share blocks of the token files, so a cache that
    holds a group's blocks serves a whole group with one fetch per block.

    Args:
        n: windows in the epoch.
        group: windows per group (>= 1). Memory is one int64 per group (the group order), so groups of
            thousands of windows cost nothing; ``group=1`` is a full shuffle with an O(n) table.
        seed, epoch: as for `FeistelPermutation`.
    """

    def __init__(self, n: int, group: int, *, seed: int, epoch: int) -> None:
        if group < 1:
            raise ValueError(f"shuffle_group must be >= 1 window, got {group}")
        self.n, self.group = int(n), int(group)
        self.n_groups = max(1, -(-self.n // self.group))
        self.last = self.n - (self.n_groups - 1) * self.group  # windows of the last group (1..group)
        self.seed, self.epoch = int(seed), int(epoch)
        outer = FeistelPermutation(self.n_groups, seed=_subkey(seed, 0x67726F75), epoch=epoch)
        self.order = outer(np.arange(self.n_groups, dtype=np.int64))  # (n_groups,) the group at each slot
        self.short_slot = int(np.flatnonzero(self.order == self.n_groups - 1)[0])
        self._inner: dict[int, FeistelPermutation] = {}

    def _within(self, g: int) -> FeistelPermutation:
        perm = self._inner.get(g)
        if perm is None:
            if len(self._inner) >= 4096:
                self._inner.clear()
            size = self.last if g == self.n_groups - 1 else self.group
            perm = self._inner[g] = FeistelPermutation(size, seed=_subkey(self.seed, g + 1), epoch=self.epoch)
        return perm

    def __call__(self, positions: np.ndarray) -> np.ndarray:
        p = np.asarray(positions, dtype=np.int64)
        flat = p.ravel()
        big, q, r = self.group, self.short_slot, self.last
        start_short = q * big  # the positions of the short group (at its slot q) are [q*G, q*G + r)
        after = np.maximum(flat - start_short - r, 0)
        slot = np.where(flat < start_short, flat // big, np.where(flat < start_short + r, q, q + 1 + after // big))
        off = np.where(
            flat < start_short, flat % big, np.where(flat < start_short + r, flat - start_short, after % big)
        )
        groups = self.order[slot]
        out = np.empty_like(flat)
        for g in np.unique(groups).tolist():
            sel = np.flatnonzero(groups == g)
            out[sel] = g * big + self._within(g)(off[sel])
        return out.reshape(p.shape)


def _subkey(seed: int, word: int) -> int:
    return int(np.random.SeedSequence([int(seed), int(word), 0x10CA1]).generate_state(1, dtype=np.uint64)[0] >> 1)
