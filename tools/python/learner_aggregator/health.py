"""grpc.health.v1.Health for LearnerServer (Debian ships no grpc_health servicer)."""

from __future__ import annotations

import threading
from typing import Dict, Iterator, Optional

import grpc

from learner_aggregator._proto import health_pb2, health_pb2_grpc

Status = health_pb2.HealthCheckResponse.ServingStatus
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SERVICE_UNKNOWN = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN

# How often a Watch stream with nothing new checks that its call is still alive.
_WATCH_POLL_SECONDS = 1.0


class HealthServicer(health_pb2_grpc.HealthServicer):
    """Serving statuses by service name ("" is the whole server). Thread-safe."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._statuses: Dict[str, Status] = {}
        self._shut_down = False

    def set(self, service: str, status: Status) -> None:
        """Sets a service's status and wakes its watchers."""
        with self._changed:
            self._statuses[service] = status
            self._changed.notify_all()

    def shutdown(self) -> None:
        """Sets every service NOT_SERVING and ends Watch streams after they sent it, so
        a draining server does not wait out its grace for them."""
        with self._changed:
            for service in self._statuses:
                self._statuses[service] = NOT_SERVING
            self._shut_down = True
            self._changed.notify_all()

    def Check(self, request: health_pb2.HealthCheckRequest,
              context: grpc.ServicerContext) -> health_pb2.HealthCheckResponse:
        with self._changed:
            status = self._statuses.get(request.service)
        if status is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service '{request.service}'")
            raise AssertionError("grpc's abort() returned")  # pragma: no cover
        return health_pb2.HealthCheckResponse(status=status)

    def Watch(self, request: health_pb2.HealthCheckRequest,
              context: grpc.ServicerContext) -> Iterator[health_pb2.HealthCheckResponse]:
        last: Optional[Status] = None
        while context.is_active():
            with self._changed:
                status = self._statuses.get(request.service, SERVICE_UNKNOWN)
                if status == last:
                    if self._shut_down:
                        return
                    self._changed.wait(_WATCH_POLL_SECONDS)
                    continue
            last = status
            yield health_pb2.HealthCheckResponse(status=status)
