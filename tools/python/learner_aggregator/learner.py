"""The types a learner and a coordinator see: the Learner Protocol (what LearnerServer
and serve() call) and the shapes of AggregatorClient's replies (plain dicts at run
time, TypedDicts to a type checker)."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Protocol, TypedDict

from learner_aggregator.samples import Sample


class Learner(Protocol):
    """What LearnerServer serves. start_task, learn and close_task are called one at a
    time, so a learner need not be thread-safe; get_data and get_resource (one at a
    time between them) may run during one of those: they should only read. Numbers in
    the dicts a learner is given come as floats (a protobuf Struct holds doubles).

    learn() may also take a `membership` keyword argument (a Membership): then each
    batch comes with the aggregator's membership stamp.
    """

    def get_resource(self) -> Mapping[str, Any]:
        """{"gpus": int, "learners": int (default 1)}."""

    def start_task(self, task_info: Dict[str, Any]) -> Optional[str]:
        """Starts a task; may return a message."""

    def get_data(self) -> Mapping[str, Any]:
        """The demand: {"batch_size", "cur_learner_iter", "task_id", "buffer_id",
        optional "extra": dict}."""

    def learn(self, samples: List[Sample]) -> Optional[Mapping[str, Any]]:
        """Trains on `samples`; the Learn info (its task_id and buffer_id, if present,
        also fill the reply's fields)."""

    def close_task(self) -> Optional[str]:
        """Ends the task; may return a message."""


class Membership(TypedDict):
    """The learners a plan is split over; a new generation means the set changed."""

    generation: int
    members: List[str]


class Resource(TypedDict):
    """AggregatorClient.resource()."""

    gpus: int
    learners: int
    learn_stream: bool


class DataDemand(TypedDict):
    """AggregatorClient.get_data()."""

    batch_size: int
    cur_learner_iter: int
    task_id: str
    buffer_id: str
    plan_id: str
    extra: Dict[str, Any]
    membership: Membership
    # The learners the demand's per-learner lists stand for (an aggregator's plan).
    learners: int


class LearnResult(TypedDict):
    """AggregatorClient.learn()."""

    info: Dict[str, Any]
    task_id: str
    buffer_id: str


class TaskReply(TypedDict):
    """AggregatorClient.start_task() and close_task()."""

    message: str


__all__ = ["DataDemand", "Learner", "LearnResult", "Membership", "Resource", "TaskReply"]
