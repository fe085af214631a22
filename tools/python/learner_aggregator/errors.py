"""The exceptions of the SDK: one root, LearnerAggregatorError, with the two sides'
errors beneath it (and learner_aggregator.worker's WorkerChannelError).

    LearnerAggregatorError
        AggregatorError       a call of AggregatorClient failed
        LearnerError          raised by a learner method to choose its status code
        WorkerChannelError    a supervised worker's channel broke
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple

import grpc

from learner_aggregator._proto import learner_pb2, status_pb2

# The trailer gRPC carries its standard error details in: a google.rpc.Status.
STATUS_DETAILS_KEY = "grpc-status-details-bin"


class LearnerAggregatorError(Exception):
    """The root of every exception the SDK defines: `except LearnerAggregatorError`
    catches them all."""


class LearnerError(LearnerAggregatorError):
    """Raised by a learner method to fail the RPC with a chosen status code (any other
    exception fails it with INTERNAL). The caller sees "LearnerError: <message>"."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class FailedLearner:
    """One learner that failed an aggregator's call: its configured id, its address,
    the status code its call ended with and its message."""
    id: str
    address: str
    code: grpc.StatusCode
    message: str


def _status_code(value: int) -> grpc.StatusCode:
    for code in grpc.StatusCode:
        if code.value[0] == value:
            return code
    return grpc.StatusCode.UNKNOWN


def failed_learners_from(metadata: Optional[Sequence[Tuple[str, Any]]]) -> List[FailedLearner]:
    """The failed learners in a call's trailing metadata: the google.rpc.Status of
    `grpc-status-details-bin` whose details pack aggregator.v1.FailedLearners (none
    when the call carries no such details)."""
    failed: List[FailedLearner] = []
    for key, value in metadata or ():
        if key != STATUS_DETAILS_KEY or not isinstance(value, bytes):
            continue
        status = status_pb2.Status.FromString(value)
        for detail in status.details:
            learners = learner_pb2.FailedLearners()
            if not detail.Unpack(learners):
                continue
            failed.extend(FailedLearner(l.id, l.address, _status_code(l.code), l.message)
                          for l in learners.learners)
    return failed


class AggregatorError(LearnerAggregatorError):
    """A call of AggregatorClient failed: `code` (a grpc.StatusCode) and `details`, the
    server's message (the aggregator names the learner and its error there), and
    `failed_learners`: the learners an aggregator says failed the call, read from the
    standard gRPC error details (`grpc-status-details-bin`), each with `.id`,
    `.address`, `.code` (a grpc.StatusCode) and `.message`; empty when the call did not
    fail on learners."""

    def __init__(self, method: str, code: grpc.StatusCode, details: str,
                 failed_learners: Optional[List[FailedLearner]] = None) -> None:
        super().__init__(f"{method}: {code.name}: {details}")
        self.method = method
        self.code = code
        self.details = details
        self.failed_learners: List[FailedLearner] = failed_learners or []
