"""The exceptions of the SDK."""

from __future__ import annotations

import grpc


class LearnerError(Exception):
    """Raised by a learner method to fail the RPC with a chosen status code (any other
    exception fails it with INTERNAL). The caller sees "LearnerError: <message>"."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class AggregatorError(Exception):
    """A call of AggregatorClient failed: `code` (a grpc.StatusCode) and `details`, the
    server's message (the aggregator names the learner and its error there)."""

    def __init__(self, method: str, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{method}: {code.name}: {details}")
        self.method = method
        self.code = code
        self.details = details
