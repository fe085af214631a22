"""CollectiveBound: how long a collective may take before its group counts as broken.

A member that hangs (a stopped process, a frozen host) never closes its sockets, so
gloo would wait its whole timeout (a minute) while the others' Learn stands still.
The bound follows what collectives really take here: max(floor, factor x p99 of the
last `window` durations), or a fixed number of seconds. A member that is merely
slower raises the p99 and so its own bound; one that stops is noticed within it.
"""

from __future__ import annotations

import collections
import math
from typing import Deque, Optional


class CollectiveBound:
    """`fixed` seconds, or (None) max(`floor`, `factor` x p99 of the last `window`
    recorded durations). Before anything was recorded the bound is `initial` (the
    group's timeout): the first collective has nothing to be compared with."""

    def __init__(self, *, fixed: Optional[float] = None, floor: float = 1.0,
                 factor: float = 20.0, window: int = 100, initial: float = 60.0) -> None:
        if fixed is not None and fixed <= 0:
            raise ValueError(f"collective_bound must be positive, not {fixed}")
        if floor <= 0 or factor <= 0 or window < 1 or initial <= 0:
            raise ValueError(f"a collective bound needs floor > 0, factor > 0, window >= 1 "
                             f"and initial > 0 (got {floor}, {factor}, {window}, {initial})")
        self.fixed = fixed
        self.floor = floor
        self.factor = factor
        self.initial = initial
        self._durations: Deque[float] = collections.deque(maxlen=window)

    def record(self, seconds: float) -> None:
        """One collective that completed, and how long it took."""
        self._durations.append(seconds)

    def p99(self) -> Optional[float]:
        """The 99th percentile of the recorded durations (nearest rank); None if none."""
        if not self._durations:
            return None
        ordered = sorted(self._durations)
        return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]

    def seconds(self) -> float:
        """The bound for the next collective."""
        if self.fixed is not None:
            return self.fixed
        p99 = self.p99()
        if p99 is None:
            return self.initial
        return max(self.floor, self.factor * p99)

    def describe(self) -> str:
        """How the current bound came about, for an error message."""
        if self.fixed is not None:
            return f"collective_bound {self.fixed:g}s"
        p99 = self.p99()
        if p99 is None:
            return f"no collective timed yet: the group's timeout {self.initial:g}s"
        return (f"max({self.floor:g}s, {self.factor:g} x p99 {p99 * 1000:.1f} ms of the "
                f"last {len(self._durations)} collectives)")
