"""A proportional prioritized replay buffer (Schaul et al. 2016) keyed by
replay_unique_id: the id of the n-th transition added is str(n); it lives in slot
n % capacity until overwritten, after which updates for it are ignored."""

from __future__ import annotations

from typing import List, Sequence, Tuple

import numpy as np


class PrioritizedReplay:
    def __init__(self, capacity: int, alpha: float, rng: np.random.Generator,
                 epsilon: float = 1e-3) -> None:
        self.capacity = capacity
        self.alpha = alpha
        self.epsilon = epsilon
        self._rng = rng
        self._data: List[bytes] = [b""] * capacity
        self._priority = np.zeros(capacity)  # already raised to alpha
        self._added = 0
        self._max_priority = 1.0

    def __len__(self) -> int:
        return min(self._added, self.capacity)

    def add(self, data: bytes) -> str:
        """Stores a transition with the highest priority seen; returns its id."""
        slot = self._added % self.capacity
        self._data[slot] = data
        self._priority[slot] = self._max_priority ** self.alpha
        self._added += 1
        return str(self._added - 1)

    def sample(self, count: int, beta: float) -> Tuple[List[str], List[bytes], np.ndarray]:
        """(ids, data, importance weights normalized to max 1) of `count` transitions
        drawn in proportion to priority."""
        size = len(self)
        p = self._priority[:size] / self._priority[:size].sum()
        slots = self._rng.choice(size, size=count, p=p)
        weights = (size * p[slots]) ** -beta
        weights /= weights.max()
        first = self._added - size  # the oldest id still stored
        ids = [str(first + (slot - first) % self.capacity) for slot in slots]
        return ids, [self._data[slot] for slot in slots], weights

    def update(self, ids: Sequence[str], priorities: Sequence[float]) -> int:
        """Sets the priorities of stored transitions; returns how many were stored."""
        updated = 0
        for replay_id, priority in zip(ids, priorities):
            n = int(replay_id)
            if n < self._added - self.capacity or n >= self._added:
                continue  # overwritten since it was sampled
            priority = float(priority) + self.epsilon
            self._priority[n % self.capacity] = priority ** self.alpha
            self._max_priority = max(self._max_priority, priority)
            updated += 1
        return updated
