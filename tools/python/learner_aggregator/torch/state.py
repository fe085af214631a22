"""TrackedState: what an ElasticGroup brings every member to on each formation (the
state of the member that trained most): modules, optimizers, step counters (attributes
of an object) and whatever a user hook saves and loads."""

from __future__ import annotations

import io
from typing import Any, Callable, List, Optional, Sequence

import torch


class TrackedState:
    """`counters`: attribute names of `counters_of` (ints); the first is the training
    step that decides which member trained most. `save_extra()` returns anything
    picklable, given to `load_extra()` on the members that adopt it."""

    def __init__(self, modules: Sequence[Any] = (), optimizers: Sequence[Any] = (),
                 counters_of: object = None, counters: Sequence[str] = ("step",),
                 save_extra: Optional[Callable[[], Any]] = None,
                 load_extra: Optional[Callable[[Any], None]] = None) -> None:
        if counters_of is not None and not counters:
            raise ValueError("counters_of needs at least one counter (the step)")
        for name in counters if counters_of is not None else ():
            if not isinstance(getattr(counters_of, name, None), int):
                raise ValueError(f"counter {name!r} of {type(counters_of).__name__} "
                                 f"is not an int attribute")
        if (save_extra is None) != (load_extra is None):
            raise ValueError("save_extra and load_extra go together")
        self.modules = list(modules)
        self.optimizers = list(optimizers)
        self.counters_of = counters_of
        self.counters = list(counters) if counters_of is not None else []
        self.save_extra = save_extra
        self.load_extra = load_extra

    def step(self) -> int:
        """How far this member has trained (0 without counters)."""
        if not self.counters:
            return 0
        return int(getattr(self.counters_of, self.counters[0]))

    def save(self) -> bytes:
        snapshot = {
            "modules": [m.state_dict() for m in self.modules],
            "optimizers": [o.state_dict() for o in self.optimizers],
            "counters": {name: int(getattr(self.counters_of, name)) for name in self.counters},
            "extra": self.save_extra() if self.save_extra is not None else None,
        }
        buffer = io.BytesIO()
        torch.save(snapshot, buffer)
        return buffer.getvalue()

    def load(self, data: bytes) -> None:
        # From a member of the same group, running the same code: trusted like it.
        snapshot = torch.load(io.BytesIO(data))
        modules: List[Any] = snapshot["modules"]
        optimizers: List[Any] = snapshot["optimizers"]
        if len(modules) != len(self.modules) or len(optimizers) != len(self.optimizers):
            raise ValueError(f"the most-trained member tracks {len(modules)} modules and "
                             f"{len(optimizers)} optimizers, this one {len(self.modules)} "
                             f"and {len(self.optimizers)}")
        for module, state in zip(self.modules, modules):
            module.load_state_dict(state)
        for optimizer, state in zip(self.optimizers, optimizers):
            optimizer.load_state_dict(state)
        for name, value in snapshot["counters"].items():
            setattr(self.counters_of, name, value)
        if self.load_extra is not None:
            self.load_extra(snapshot["extra"])
