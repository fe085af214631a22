"""The exceptions of the SDK: one root, LearnerAggregatorError, with the two sides'
errors beneath it (and learner_aggregator.worker's WorkerChannelError).

    LearnerAggregatorError
        AggregatorError       a call of AggregatorClient failed
        LearnerError          raised by a learner method to choose its status code
        WorkerChannelError    a supervised worker's channel broke
"""

from __future__ import annotations

import grpc


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


class AggregatorError(LearnerAggregatorError):
    """A call of AggregatorClient failed: `code` (a grpc.StatusCode) and `details`, the
    server's message (the aggregator names the learner and its error there)."""

    def __init__(self, method: str, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{method}: {code.name}: {details}")
        self.method = method
        self.code = code
        self.details = details
