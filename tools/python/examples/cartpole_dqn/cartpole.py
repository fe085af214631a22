"""CartPole with the classic dynamics and termination rules (Barto, Sutton & Anderson
1983, as in gym's CartPole-v1): Euler steps of 0.02 s, force +/-10 N, the episode
terminates when the pole leans past 12 degrees or the cart leaves +/-2.4, and is
truncated after 500 steps. Reward 1 per step. numpy only."""

from __future__ import annotations

import math
from typing import Optional, Tuple

import numpy as np

GRAVITY = 9.8
MASS_CART = 1.0
MASS_POLE = 0.1
TOTAL_MASS = MASS_CART + MASS_POLE
HALF_POLE_LENGTH = 0.5
POLE_MASS_LENGTH = MASS_POLE * HALF_POLE_LENGTH
FORCE = 10.0
TAU = 0.02
THETA_LIMIT = 12 * 2 * math.pi / 360
X_LIMIT = 2.4
MAX_STEPS = 500


class CartPole:
    """One environment. Observations: [x, x_dot, theta, theta_dot] (float32)."""

    observation_size = 4
    actions = 2

    def __init__(self, seed: Optional[int] = None) -> None:
        self._rng = np.random.default_rng(seed)
        self._state = np.zeros(4)
        self._steps = 0

    def reset(self) -> np.ndarray:
        self._state = self._rng.uniform(-0.05, 0.05, size=4)
        self._steps = 0
        return self._state.astype(np.float32)

    def step(self, action: int) -> Tuple[np.ndarray, float, bool, bool]:
        """(observation, reward, terminated, truncated)."""
        x, x_dot, theta, theta_dot = self._state
        force = FORCE if action == 1 else -FORCE
        cos, sin = math.cos(theta), math.sin(theta)
        temp = (force + POLE_MASS_LENGTH * theta_dot ** 2 * sin) / TOTAL_MASS
        theta_acc = (GRAVITY * sin - cos * temp) / (
            HALF_POLE_LENGTH * (4.0 / 3.0 - MASS_POLE * cos ** 2 / TOTAL_MASS))
        x_acc = temp - POLE_MASS_LENGTH * theta_acc * cos / TOTAL_MASS
        x, x_dot = x + TAU * x_dot, x_dot + TAU * x_acc
        theta, theta_dot = theta + TAU * theta_dot, theta_dot + TAU * theta_acc
        self._state = np.array([x, x_dot, theta, theta_dot])
        self._steps += 1
        terminated = bool(abs(x) > X_LIMIT or abs(theta) > THETA_LIMIT)
        truncated = not terminated and self._steps >= MAX_STEPS
        return self._state.astype(np.float32), 1.0, terminated, truncated
