"""A Python program as a supervised worker of the C++ Supervisor or of aggregatord.

The supervisor starts the program with one end of a socketpair open on the fd named by
AGGREGATOR_WORKER_FD. Frames are a 4-byte little-endian length, then a serialized
aggregator.v1.WorkerRequest (supervisor to child) or WorkerReply (child to supervisor);
see proto/worker.proto. This module mirrors lib/supervisor/worker_runtime.cc:

- Start-up handshake: once init succeeds the child sends WorkerReply{method: "_init"}
  with an empty req_id; when init fails it sends the same with an INIT_FAILED error
  and exits with 1.
- Each request names a public method of the object (called with the request's args)
  or "_getattr" (args[0] names a public, non-callable attribute). Errors:
  NO_SUCH_METHOD, NO_SUCH_ATTRIBUTE, and FAILED with "<ExceptionType>: <message>"
  when the method raises (KeyboardInterrupt and SystemExit too; after SystemExit's
  answer the worker exits with its code).
- "_shutdown" (not answered) or the end of the channel ends the serving loop; exit 0.
  A missing or broken channel: exit 2.

Example (a worker whose construction failing is reported as an init failure):

    class Counter:
        def __init__(self):
            self.count = 0
        def add(self, n):
            self.count += n
            return self.count

    if __name__ == "__main__":
        sys.exit(run_worker(Counter))
"""

from __future__ import annotations

import functools
import inspect
import os
import socket
import struct
import sys
import threading
import traceback
from typing import Any, Optional, Type, TypeVar

from google.protobuf.message import DecodeError, Message

from learner_aggregator.errors import LearnerAggregatorError
from learner_aggregator.structs import fill_value, from_list, to_value
from learner_aggregator._proto import worker_pb2

WORKER_FD_ENV = "AGGREGATOR_WORKER_FD"
# Frames larger than this are a protocol error (lib/supervisor/worker_channel.h).
MAX_FRAME_BYTES = 256 << 20

GETATTR_METHOD = "_getattr"
SHUTDOWN_METHOD = "_shutdown"
INIT_METHOD = "_init"
# Unsolicited, from a learner worker once its gRPC server is bound (see serve()).
LISTENING_METHOD = "_listening"

Kind = worker_pb2.WorkerError
M = TypeVar("M", bound=Message)


class WorkerChannelError(LearnerAggregatorError):
    """The channel is missing, broken, or carried a frame that does not parse."""


class WorkerChannel:
    """The child's end of its channel. One reader and one writer may use it at once
    (writes are serialized by a lock, so any thread may write)."""

    def __init__(self, sock: socket.socket, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        sock.setblocking(True)
        self._sock = sock
        self._max_frame_bytes = max_frame_bytes
        self._write_lock = threading.Lock()

    @classmethod
    def from_env(cls) -> Optional["WorkerChannel"]:
        """The channel named by AGGREGATOR_WORKER_FD, or None when it is not set.
        The fd is made close-on-exec so the worker's own children do not inherit it."""
        text = os.environ.get(WORKER_FD_ENV)
        if text is None:
            return None
        try:
            fd = int(text)
            os.set_inheritable(fd, False)
            sock = socket.socket(fileno=fd)
        except (ValueError, OSError) as e:
            raise WorkerChannelError(
                f"{WORKER_FD_ENV} is '{text}', not an open socket fd: {e}") from None
        return cls(sock)

    def read(self, message_type: Type[M]) -> Optional[M]:
        """The next frame parsed as `message_type`, or None at a clean end of stream."""
        header = self._read_exactly(4, at_frame_start=True)
        if header is None:
            return None
        (length,) = struct.unpack("<I", header)
        if length > self._max_frame_bytes:
            raise WorkerChannelError(
                f"worker channel: the peer announced a frame of {length} bytes, over the "
                f"limit of {self._max_frame_bytes}")
        body = self._read_exactly(length, at_frame_start=False) if length else b""
        message: M = message_type()
        try:
            message.ParseFromString(body)
        except DecodeError:
            raise WorkerChannelError(
                f"worker channel: a frame of {length} bytes does not parse as "
                f"{message_type.DESCRIPTOR.full_name}") from None
        return message

    def write(self, message: Message) -> None:
        """Writes one frame; WorkerChannelError when the peer has gone."""
        body = message.SerializeToString()
        if len(body) > self._max_frame_bytes:
            raise WorkerChannelError(
                f"worker channel: a frame of {len(body)} bytes exceeds the limit of "
                f"{self._max_frame_bytes}")
        with self._write_lock:
            try:
                self._sock.sendall(struct.pack("<I", len(body)) + body)
            except OSError as e:
                raise WorkerChannelError(f"worker channel: write failed: {e}") from None

    def close(self) -> None:
        self._sock.close()

    def _read_exactly(self, n: int, at_frame_start: bool) -> Optional[bytes]:
        buffer = bytearray(n)
        view = memoryview(buffer)
        got = 0
        while got < n:
            try:
                count = self._sock.recv_into(view[got:])
            except ConnectionResetError:
                count = 0  # the supervisor exited with our replies unread: an end
            except OSError as e:
                raise WorkerChannelError(f"worker channel: read failed: {e}") from None
            if count == 0:
                if at_frame_start and got == 0:
                    return None
                raise WorkerChannelError(
                    "worker channel: the stream ended inside a frame")
            got += count
        return bytes(buffer)


class Dispatcher:
    """Answers WorkerRequests with the public methods and attributes of `target`.
    `lock`, if given, is held around every call into `target`."""

    def __init__(self, target: Any, lock: Optional[threading.Lock] = None) -> None:
        self._target = target
        self._lock = lock or threading.Lock()
        # A SystemExit a method raised, answered as FAILED: serve_channel() ends with it.
        self.exit_request: Optional[SystemExit] = None

    def handle(self, request: worker_pb2.WorkerRequest) -> worker_pb2.WorkerReply:
        """The reply to one request (not "_shutdown"). Never raises an Exception."""
        reply = worker_pb2.WorkerReply(req_id=request.req_id, method=request.method)
        try:
            with self._lock:
                if request.method == GETATTR_METHOD:
                    self._getattr(request, reply)
                else:
                    self._call(request, reply)
        except Exception as e:  # the method's (or a conversion's) failure
            _set_error(reply, Kind.KIND_FAILED, f"{type(e).__name__}: {e}")
        except BaseException as e:  # KeyboardInterrupt, SystemExit: answered all the same
            _set_error(reply, Kind.KIND_FAILED, f"{type(e).__name__}: {e}")
            if isinstance(e, SystemExit):
                self.exit_request = e
        return reply

    def _getattr(self, request: worker_pb2.WorkerRequest,
                 reply: worker_pb2.WorkerReply) -> None:
        args = request.args.values
        if not args or args[0].WhichOneof("kind") != "string_value":
            _set_error(reply, Kind.KIND_FAILED,
                       "_getattr needs the attribute name as its first argument")
            return
        name = args[0].string_value
        value = getattr(self._target, name, _MISSING) if _public(name) else _MISSING
        if value is _MISSING or callable(value):
            _set_error(reply, Kind.KIND_NO_SUCH_ATTRIBUTE, f"no attribute '{name}'")
            return
        fill_value(reply.data, value)

    def _call(self, request: worker_pb2.WorkerRequest,
              reply: worker_pb2.WorkerReply) -> None:
        name = request.method
        method = getattr(self._target, name, None) if _public(name) else None
        if not callable(method):
            _set_error(reply, Kind.KIND_NO_SUCH_METHOD, f"no method '{name}'")
            return
        fill_value(reply.data, method(*from_list(request.args)))


_MISSING = object()


def _public(name: str) -> bool:
    return bool(name) and not name.startswith("_")


def _set_error(reply: worker_pb2.WorkerReply, kind: "worker_pb2.WorkerError.Kind",
               message: str) -> None:
    reply.ClearField("data")
    reply.error.kind = kind
    reply.error.message = message


def init_reply(error: Optional[str] = None) -> worker_pb2.WorkerReply:
    """The start-up handshake: success, or INIT_FAILED with `error`."""
    reply = worker_pb2.WorkerReply(method=INIT_METHOD)
    if error is not None:
        _set_error(reply, Kind.KIND_INIT_FAILED, error)
    return reply


def listening_reply(port: int) -> worker_pb2.WorkerReply:
    """The unsolicited frame a learner worker sends once its gRPC server is bound."""
    return worker_pb2.WorkerReply(method=LISTENING_METHOD, data=to_value({"port": port}))


def serve_channel(channel: WorkerChannel, dispatcher: Dispatcher) -> Optional[SystemExit]:
    """Answers requests until "_shutdown" or the end of the channel (None), or until a
    method raised SystemExit (returned once it is answered)."""
    while True:
        request = channel.read(worker_pb2.WorkerRequest)
        if request is None or request.method == SHUTDOWN_METHOD:
            return None
        channel.write(dispatcher.handle(request))
        if dispatcher.exit_request is not None:
            return dispatcher.exit_request


def _is_factory(obj: Any) -> bool:
    return inspect.isclass(obj) or inspect.isroutine(obj) or isinstance(obj, functools.partial)


def run_worker(obj: Any) -> int:
    """Serves `obj` on the channel named by AGGREGATOR_WORKER_FD; returns the exit code
    (0 after "_shutdown" or the end of the channel, 1 when init failed, 2 when the
    channel is missing or broken). Use as `sys.exit(run_worker(obj))`. A method that
    raises SystemExit is answered (FAILED), then run_worker raises that SystemExit.

    `obj` is the object to serve, or a class, function or functools.partial that builds
    it when called with no arguments: an exception raised while building it is then
    reported to the supervisor as INIT_FAILED. (Any other object, callable or not, is
    served as it is.)
    """
    try:
        channel = WorkerChannel.from_env()
    except WorkerChannelError as e:
        print(f"worker: {e}", file=sys.stderr)
        return 2
    if channel is None:
        print(f"worker: {WORKER_FD_ENV} is not set; this program must be started by the "
              "aggregator's supervisor", file=sys.stderr)
        return 2
    try:
        target = obj() if _is_factory(obj) else obj
    except Exception as e:
        message = f"init raised {type(e).__name__}: {e}"
        traceback.print_exc()
        print(f"worker: init failed: {message}", file=sys.stderr)
        try:
            channel.write(init_reply(message))
        except WorkerChannelError:
            pass
        return 1
    try:
        channel.write(init_reply())
        exit_request = serve_channel(channel, Dispatcher(target))
    except WorkerChannelError as e:
        print(f"worker: {e}", file=sys.stderr)
        return 2
    if exit_request is not None:
        raise exit_request
    return 0


__all__ = [
    "Dispatcher", "WorkerChannel", "WorkerChannelError", "WORKER_FD_ENV",
    "init_reply", "listening_reply", "run_worker", "serve_channel",
]
