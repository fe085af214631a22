"""ElasticGroup: a torch.distributed gloo group that follows the aggregator's membership.

Each Learn carries the membership stamp (generation, members in split order). When the
generation moves, the group is formed again over the new members (rank: the place in
the list) and every member takes the state of the one that trained most, so a
restarted member catches up and all stay bit-identical. A collective that breaks (a
member died) or outlasts its bound (a member hangs: CollectiveBound) raises
LearnerError(ABORTED), which the aggregator does not hold against the survivors; the
next Learn brings the membership without the lost member.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence

import grpc
import torch
import torch.distributed as dist

from learner_aggregator.errors import LearnerError
from learner_aggregator.learner import Membership
from learner_aggregator.torch.bound import CollectiveBound
from learner_aggregator.torch.rendezvous import Rendezvous
from learner_aggregator.torch.state import TrackedState

_log = logging.getLogger("learner_aggregator")


@dataclass(frozen=True)
class Formation:
    """What one (re)formation did: this member's place, and whose state all took."""

    generation: int
    members: List[str]
    rank: int
    world_size: int
    source: int  # the rank whose state every member now has
    steps: List[int]  # each rank's training step before


class ElasticGroup:
    """The gloo group of the learner `learner_id` (its id in the aggregator, e.g.
    "dqn-0"). Members find each other through `rendezvous_dir` (a directory all of
    them see, for this run only) or `store_address` ("host:port" of a TCP store, e.g.
    one serve_store() hosts: across hosts).

    `timeout` bounds forming a group (all members arriving, the state broadcast).
    A collective waits at most `collective_bound` seconds, or by default
    max(`bound_floor`, `bound_factor` x p99 of the last `bound_window` collectives);
    past that the group counts as broken.

    Use: track() the state once it exists, join(membership) at the start of each
    learn, all_reduce_gradients(module) between backward() and the optimizer's step.
    Not thread-safe: call it from one learn at a time (as LearnerServer does).
    """

    def __init__(self, learner_id: str, *, rendezvous_dir: Optional[str] = None,
                 store_address: Optional[str] = None, timeout: float = 60.0,
                 collective_bound: Optional[float] = None, bound_floor: float = 1.0,
                 bound_factor: float = 20.0, bound_window: int = 100) -> None:
        if not learner_id:
            raise ValueError("an ElasticGroup needs the learner's id")
        self.learner_id = learner_id
        self.timeout = timeout
        self._rendezvous = Rendezvous(rendezvous_dir, store_address, timeout)
        self.bound = CollectiveBound(fixed=collective_bound, floor=bound_floor,
                                     factor=bound_factor, window=bound_window,
                                     initial=timeout)
        self._state = TrackedState()
        self._group: Any = None  # the ProcessGroupGloo; None alone or broken
        self.generation: Optional[int] = None  # of the group this member is in
        self.members: List[str] = []
        self.rank = 0
        self.world_size = 1
        self._attempt = 0  # formations of self._last_generation tried
        self._last_generation: Optional[int] = None

    def track(self, *, modules: Sequence[Any] = (), optimizers: Sequence[Any] = (),
              counters_of: object = None, counters: Sequence[str] = ("step",),
              save_extra: Optional[Callable[[], Any]] = None,
              load_extra: Optional[Callable[[Any], None]] = None) -> None:
        """What each formation brings all members to: `modules` and `optimizers`
        (their state_dicts), the int attributes `counters` of `counters_of` (the first
        is the training step: the member with the most trained most), and
        save_extra()'s value, given to load_extra(). Call again when they are replaced
        (a new task)."""
        self._state = TrackedState(modules, optimizers, counters_of, counters,
                                   save_extra, load_extra)

    def join(self, membership: Optional[Membership]) -> Optional[Formation]:
        """Re-forms the group if `membership` (the Learn's stamp) has another
        generation than the group; None if nothing changed (or no membership: an
        aggregator that does not stamp, training alone). LearnerError(ABORTED) if the
        formation failed; the next join() tries again."""
        if not membership or not membership.get("members"):
            return None
        generation, members = int(membership["generation"]), list(membership["members"])
        if generation == self.generation:
            return None
        if self.learner_id not in members:
            raise LearnerError(grpc.StatusCode.FAILED_PRECONDITION,
                               f"elastic group: learner id {self.learner_id!r} is not among "
                               f"the members {members} of generation {generation}")
        self.leave()
        self._attempt = self._attempt + 1 if generation == self._last_generation else 0
        self._last_generation = generation
        rank, world_size = members.index(self.learner_id), len(members)
        steps, source = [self._state.step()], 0
        if world_size > 1:
            try:
                group = self._form(generation, rank, world_size)
            except RuntimeError as e:
                raise self._error(f"generation {generation} (rank {rank} of {world_size}, "
                                  f"{members}): forming the group through "
                                  f"{self._rendezvous.describe()} failed: {e}") from None
            self._group = group
            self.rank, self.world_size = rank, world_size  # for _collective's messages
            self.generation, self.members = generation, members
            steps, source = self._adopt_most_trained()
        self.generation, self.members = generation, members
        self.rank, self.world_size = rank, world_size
        return Formation(generation, members, rank, world_size, source, steps)

    def all_reduce_gradients(self, module: Any) -> None:
        """Averages the gradients of `module`'s parameters over the group in one
        collective (a parameter without a gradient counts as zeros). Alone: nothing.
        LearnerError(ABORTED) if the collective broke or outlasted its bound."""
        if self.world_size == 1:
            return
        if self._group is None:
            raise self._error("all_reduce_gradients: the group is broken; join() the "
                              "next membership first")
        parameters = [p for p in module.parameters() if p.requires_grad]
        for p in parameters:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        flat = torch.cat([p.grad.reshape(-1) for p in parameters])
        self._collective("the all-reduce of gradients", lambda: self._group.allreduce([flat]),
                         self.bound.seconds(), timed=True)
        flat /= self.world_size
        offset = 0
        for p in parameters:
            p.grad.copy_(flat[offset:offset + p.grad.numel()].view_as(p.grad))
            offset += p.grad.numel()

    def leave(self) -> None:
        """Leaves the group (the next join() forms a new one)."""
        group, self._group = self._group, None
        self.generation, self.members, self.rank, self.world_size = None, [], 0, 1
        del group  # an idle gloo group closes at once

    # -- inside ------------------------------------------------------------------

    def _form(self, generation: int, rank: int, world_size: int) -> Any:
        store = self._rendezvous.open(generation, self._attempt, world_size)
        return dist.ProcessGroupGloo(store, rank, world_size,
                                     datetime.timedelta(seconds=self.timeout))

    def _adopt_most_trained(self) -> "tuple[List[int], int]":
        """Every member's step, then the state of the first with the most, everywhere."""
        steps = torch.zeros(self.world_size, dtype=torch.int64)
        steps[self.rank] = self._state.step()
        self._collective("gathering the members' steps",
                         lambda: self._group.allreduce([steps]), self.timeout)
        each = [int(s) for s in steps.tolist()]
        source = each.index(max(each))
        payload = self._state.save() if self.rank == source else b""
        size = torch.tensor([len(payload)], dtype=torch.int64)
        self._broadcast("the size of the state", size, source)
        if self.rank == source:
            data = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
        else:
            data = torch.empty(int(size[0]), dtype=torch.uint8)
        self._broadcast("the state of the most-trained member", data, source)
        if self.rank != source:
            self._state.load(data.numpy().tobytes())
        return each, source

    def _broadcast(self, what: str, tensor: Any, source: int) -> None:
        options = dist.BroadcastOptions()
        options.rootRank, options.rootTensor = source, 0
        self._collective(f"broadcasting {what} from rank {source}",
                         lambda: self._group.broadcast([tensor], options), self.timeout)

    def _collective(self, what: str, start: Callable[[], Any], bound: float,
                    timed: bool = False) -> None:
        """Runs one collective, waiting at most `bound` seconds for it; `timed`: its
        duration feeds the bound."""
        started = time.monotonic()
        work = None
        try:
            work = start()
            work.wait(datetime.timedelta(seconds=bound))
        except RuntimeError as e:
            took = time.monotonic() - started
            where = (f"generation {self.generation} (rank {self.rank} of {self.world_size}, "
                     f"{self.members})")
            self._abandon(work)
            if took >= bound:
                how = (f"{what} waited {took:.2f}s, past its bound of {bound:.2f}s "
                       f"({self.bound.describe() if timed else 'the group timeout'}): "
                       f"a member is stuck")
            else:
                how = f"{what} broke after {took:.2f}s: {e}"
            raise self._error(f"{where}: {how}") from None
        if timed:
            self.bound.record(time.monotonic() - started)

    def _abandon(self, work: Any) -> None:
        """Drops a broken group without waiting for it. Its operation `work` may still
        be running in gloo (until gloo's timeout), and destroying a gloo group joins
        its threads holding the GIL: it is dropped by a thread of its own once that
        operation has ended, off the learner's path (at exit, simply left)."""
        group = self._group
        self.leave()
        if group is not None:
            threading.Thread(target=_drop_when_done, args=([group, work],), daemon=True,
                             name="elastic-group-reaper").start()

    def _error(self, message: str) -> LearnerError:
        self.generation = None  # the next Learn forms the group again
        return LearnerError(grpc.StatusCode.ABORTED,
                            f"elastic group of {self.learner_id}: {message}")


def _drop_when_done(holder: List[Any]) -> None:
    """Waits for the operation that broke (it fails at gloo's timeout at the latest),
    then drops the last reference to its group, now idle."""
    work = holder.pop()
    group = holder.pop()
    if work is not None:
        try:
            work.wait()
        except RuntimeError:
            pass
    del work, group
    _log.debug("a broken elastic group was dropped")
