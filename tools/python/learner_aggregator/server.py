"""LearnerServer: any Python object with the learner methods, served as the Learner API.

The learner object has
    get_resource() -> dict           {"gpus": int, "learners": int (default 1)}
    start_task(task_info: dict)      may return a message string
    get_data() -> dict               {"batch_size", "cur_learner_iter", "task_id",
                                      "buffer_id", optional "extra": dict}
    learn(samples: list[Sample]) -> dict   the Learn info; its task_id and buffer_id,
                                      if present, also fill the reply's fields. A
                                      learn that takes a `membership` keyword gets
                                      the aggregator's {"generation", "members"}
                                      (learner ids, in split order) with each batch:
                                      a new generation means the set of learners
                                      training together changed.
    close_task()                     may return a message string
Its start_task, learn and close_task are serialized (one at a time), so it need not be
thread-safe; get_data and get_resource, the queries, are serialized among themselves
but may run while one of those runs (a learn stuck in a collective still answers what
it wants): they should only read. A method
that raises fails its RPC with INTERNAL (or a LearnerError's code) and the message
"<ExceptionType>: <message>"; the server goes on serving. KeyboardInterrupt and
SystemExit are answered the same way (a handler thread would otherwise swallow them and
leave the caller waiting for its deadline); after SystemExit's answer the process exits
with its code (serve() drains first and raises it in the main thread; a LearnerServer
alone exits at once). A missing method is UNIMPLEMENTED. grpc.health.v1 is served too: SERVING from start() until stop().
"""

from __future__ import annotations

import inspect
import logging
import os
import queue
import signal
import sys
import threading
from concurrent import futures
from typing import Any, Callable, Dict, List, NoReturn, Optional, Tuple, TypeVar

import grpc
from google.protobuf.message import DecodeError

from learner_aggregator import health, wire, worker
from learner_aggregator._proto import health_pb2_grpc, learner_pb2, learner_pb2_grpc
from learner_aggregator.errors import LearnerError
from learner_aggregator.learner import Learner, Membership
from learner_aggregator.samples import Sample
from learner_aggregator.structs import fill_struct, from_struct, to_struct

_log = logging.getLogger("learner_aggregator")

LEARNER_SERVICE = "aggregator.v1.Learner"

R = TypeVar("R")


def _abort(context: grpc.ServicerContext, code: grpc.StatusCode, details: str) -> NoReturn:
    """context.abort(), which raises, typed as never returning."""
    context.abort(code, details)
    raise AssertionError("grpc's abort() returned")  # pragma: no cover


# The learner methods that only read, answered beside a call in progress.
_QUERIES = frozenset({"get_data", "get_resource"})


class _LearnerServicer(learner_pb2_grpc.LearnerServicer):
    """Translates between the Learner RPCs and the learner object's methods."""

    def __init__(self, learner: Learner, lock: threading.Lock, query_lock: threading.Lock,
                 on_exit: Callable[[Any], None]) -> None:
        self._learner = learner
        self._lock = lock
        self._query_lock = query_lock
        self._on_exit = on_exit
        # Whether learn() takes `membership`: inspect.signature() costs more than the
        # rest of a small Learn's bookkeeping, so it is asked once, not per call.
        self._learn_takes_membership: Optional[bool] = None

    def _call(self, context: grpc.ServicerContext, name: str, *args: Any,
              **kwargs: Any) -> Any:
        method = getattr(self._learner, name, None)
        if not callable(method):
            _abort(context, grpc.StatusCode.UNIMPLEMENTED,
                   f"the learner has no method {name}()")
        try:
            with self._query_lock if name in _QUERIES else self._lock:
                return method(*args, **kwargs)
        except LearnerError as e:
            _abort(context, e.code, f"{type(e).__name__}: {e}")
        except Exception as e:
            _log.exception("learner %s() raised", name)
            _abort(context, grpc.StatusCode.INTERNAL, f"{type(e).__name__}: {e}")
        except BaseException as e:  # KeyboardInterrupt, SystemExit: answered all the same
            _log.error("learner %s() raised %s", name, type(e).__name__)
            if isinstance(e, SystemExit):
                code = e.code
                # Runs once the answer has gone out (the RPC has terminated).
                context.add_callback(lambda: self._on_exit(code))
            _abort(context, grpc.StatusCode.INTERNAL, f"{type(e).__name__}: {e}")

    def _convert(self, context: grpc.ServicerContext, name: str,
                 build: Callable[[], R]) -> R:
        """Builds a reply from a method's result; a result of the wrong shape is the
        learner's bug, reported as INTERNAL."""
        try:
            return build()
        except (TypeError, ValueError, AttributeError) as e:
            _abort(context, grpc.StatusCode.INTERNAL,
                   f"{name}() returned what the reply cannot hold: {type(e).__name__}: {e}")

    def GetResource(self, request: learner_pb2.GetResourceRequest,
                    context: grpc.ServicerContext) -> learner_pb2.Resource:
        resource = self._call(context, "get_resource") or {}
        return self._convert(context, "get_resource", lambda: learner_pb2.Resource(
            gpus=int(resource.get("gpus", 0)), learners=int(resource.get("learners", 1))))

    def StartTask(self, request: learner_pb2.StartTaskRequest,
                  context: grpc.ServicerContext) -> learner_pb2.StartTaskReply:
        message = self._call(context, "start_task", from_struct(request.task_info))
        return learner_pb2.StartTaskReply(message=str(message or ""))

    def GetData(self, request: learner_pb2.GetDataRequest,
                context: grpc.ServicerContext) -> learner_pb2.DataDemand:
        demand = self._call(context, "get_data")

        def build() -> learner_pb2.DataDemand:
            reply = learner_pb2.DataDemand(
                batch_size=int(demand["batch_size"]),
                cur_learner_iter=int(demand.get("cur_learner_iter", 0)),
                task_id=str(demand.get("task_id", "")),
                buffer_id=str(demand.get("buffer_id", "")))
            if demand.get("extra"):
                reply.extra.CopyFrom(to_struct(demand["extra"]))
            return reply

        return self._convert(context, "get_data", build)

    def Learn(self, request: bytes, context: grpc.ServicerContext) -> learner_pb2.LearnReply:
        """Learn from the request's bytes (start() registers it so): the samples are read
        without a protobuf message each, and their meta is decoded when first read."""
        try:
            samples, rest = wire.decode_learn_request(request)
        except DecodeError as e:
            _abort(context, grpc.StatusCode.INTERNAL, f"cannot parse the LearnRequest: {e}")
        return self._learn(samples, rest, context)

    def _learn(self, samples: List[Sample], request: learner_pb2.LearnRequest,
               context: grpc.ServicerContext) -> learner_pb2.LearnReply:
        extra: Dict[str, Membership] = {}
        if request.HasField("membership") and self._takes_membership():
            extra["membership"] = {"generation": request.membership.generation,
                                   "members": list(request.membership.members)}
        info = self._call(context, "learn", samples, **extra) or {}

        def build() -> learner_pb2.LearnReply:
            reply = learner_pb2.LearnReply(task_id=str(info.get("task_id", "")),
                                           buffer_id=str(info.get("buffer_id", "")))
            fill_struct(reply.info, info)  # in place: to_struct's Struct would be copied
            return reply

        return self._convert(context, "learn", build)

    def _takes_membership(self) -> bool:
        if self._learn_takes_membership is None:
            self._learn_takes_membership = _takes(getattr(self._learner, "learn", None),
                                                  "membership")
        return self._learn_takes_membership

    def CloseTask(self, request: learner_pb2.CloseTaskRequest,
                  context: grpc.ServicerContext) -> learner_pb2.CloseTaskReply:
        message = self._call(context, "close_task")
        return learner_pb2.CloseTaskReply(message=str(message or ""))


class _DaemonThreadPool(futures.Executor):
    """gRPC's handler threads as daemon threads. The standard pool's threads are joined
    when the interpreter exits, so one learner method that never returns kept the
    process alive long after serve()'s grace had cancelled its call; a daemon thread is
    abandoned instead. Threads start on demand, up to `max_workers`, and are reused."""

    def __init__(self, max_workers: int) -> None:
        self._max_workers = max_workers
        self._work: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._threads: List[threading.Thread] = []
        self._busy = 0
        self._shut_down = False

    @property
    def busy(self) -> int:
        """How many submitted calls are running now."""
        with self._lock:
            return self._busy

    def submit(self, fn: Callable[..., R], /, *args: Any,
               **kwargs: Any) -> "futures.Future[R]":
        future: "futures.Future[R]" = futures.Future()
        with self._lock:
            if self._shut_down:
                raise RuntimeError("cannot schedule new calls after shutdown")
            self._work.put((future, fn, args, kwargs))
            if not self._idle.acquire(blocking=False) and \
                    len(self._threads) < self._max_workers:
                thread = threading.Thread(target=self._run, daemon=True,
                                          name=f"learner-rpc-{len(self._threads)}")
                self._threads.append(thread)
                thread.start()
        return future

    def _run(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                self._work.put(None)  # wakes the next thread
                return
            future, fn, args, kwargs = item
            del item
            if future.set_running_or_notify_cancel():
                with self._lock:
                    self._busy += 1
                try:
                    future.set_result(fn(*args, **kwargs))
                except BaseException as e:
                    future.set_exception(e)
                finally:
                    with self._lock:
                        self._busy -= 1
            del future, fn, args, kwargs
            self._idle.release()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shut_down = True
            threads = list(self._threads)
        self._work.put(None)
        if wait:
            for thread in threads:
                thread.join()


def _takes(method: Any, keyword: str) -> bool:
    """Whether `method` accepts the keyword argument `keyword`."""
    try:
        parameters = inspect.signature(method).parameters
    except (TypeError, ValueError):
        return False
    return keyword in parameters or any(
        p.kind == inspect.Parameter.VAR_KEYWORD for p in parameters.values())


class LearnerServer:
    """Serves `learner` on `address` ("host:port"; port 0 picks a free one).

    `max_message_bytes` bounds messages both ways (training batches are large).
    `tls_cert` and `tls_key` (PEM file paths) serve TLS, as example_learner's --tls-cert
    and --tls-key; with `tls_client_ca` clients must present a certificate it signed
    (mTLS). Use start(), then port, then stop(grace); or as a context manager.
    Thread-safe.
    """

    def __init__(self, learner: Learner, address: str, max_message_bytes: int = 1 << 30,
                 *, max_workers: int = 16, tls_cert: Optional[str] = None,
                 tls_key: Optional[str] = None,
                 tls_client_ca: Optional[str] = None) -> None:
        if (tls_cert is None) != (tls_key is None):
            raise ValueError("tls_cert and tls_key go together")
        if tls_client_ca is not None and tls_cert is None:
            raise ValueError("tls_client_ca needs tls_cert and tls_key")
        self.learner = learner
        self.address = address
        self._tls = (tls_cert, tls_key, tls_client_ca)
        self.health = health.HealthServicer()
        self._max_message_bytes = max_message_bytes
        self._max_workers = max_workers
        # Serializes calls into the learner (the gRPC and worker-channel paths alike)...
        self.lock = threading.Lock()
        # ... but get_data and get_resource over gRPC, which take this one: a learn
        # stuck in a collective must not hold back what the aggregator asks meanwhile.
        self.query_lock = threading.Lock()
        self._server: Optional[grpc.Server] = None
        self._pool: Optional[_DaemonThreadPool] = None
        self._port: Optional[int] = None
        # What a learner's SystemExit does once answered; serve() replaces it.
        self.on_exit: Callable[[Any], None] = _exit_now

    def _options(self) -> List[Tuple[str, int]]:
        return [
            ("grpc.max_send_message_length", self._max_message_bytes),
            ("grpc.max_receive_message_length", self._max_message_bytes),
            # A port another process holds must fail to bind, not be shared.
            ("grpc.so_reuseport", 0),
            # Aggregators ping their learners (connect.keepalive, at least 1 s apart)
            # to notice a hung host: accept that, with or without calls open.
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.min_ping_interval_without_data_ms", 1000),
        ]

    def _credentials(self) -> Optional[grpc.ServerCredentials]:
        cert, key, client_ca = self._tls
        if cert is None or key is None:
            return None
        with open(key, "rb") as k, open(cert, "rb") as c:
            pair = (k.read(), c.read())
        roots = None
        if client_ca is not None:
            with open(client_ca, "rb") as f:
                roots = f.read()
        return grpc.ssl_server_credentials([pair], root_certificates=roots,
                                           require_client_auth=roots is not None)

    def _bind(self, server: grpc.Server) -> int:
        """Adds the listening port, with TLS when it was asked for."""
        credentials = self._credentials()  # OSError when a file cannot be read
        try:
            if credentials is None:
                port = server.add_insecure_port(self.address)
            else:
                port = server.add_secure_port(self.address, credentials)
        except RuntimeError as e:
            raise OSError(f"cannot listen on '{self.address}': {e}") from None
        if port == 0:
            raise OSError(f"cannot listen on '{self.address}'")
        return int(port)

    def start(self) -> "LearnerServer":
        """Binds and starts serving; OSError when the address cannot be bound."""
        if self._server is not None:
            return self
        pool = _DaemonThreadPool(self._max_workers)
        server = grpc.server(pool, options=self._options())
        # The generated *_pb2_grpc modules are untyped (Debian has no grpc stubs).
        servicer = _LearnerServicer(self.learner, self.lock, self.query_lock,
                                    lambda code: self.on_exit(code))
        # Learn takes its request as bytes (servicer.Learn): added first, this handler
        # answers it before the generated one (which would parse it), which serves the rest.
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            LEARNER_SERVICE, {"Learn": grpc.unary_unary_rpc_method_handler(
                servicer.Learn, request_deserializer=None,
                response_serializer=learner_pb2.LearnReply.SerializeToString)}),))
        learner_pb2_grpc.add_LearnerServicer_to_server(  # type: ignore[no-untyped-call]
            servicer, server)
        health_pb2_grpc.add_HealthServicer_to_server(  # type: ignore[no-untyped-call]
            self.health, server)
        self._port = self._bind(server)
        server.start()
        self._server, self._pool = server, pool
        self.health.set("", health.SERVING)
        self.health.set(LEARNER_SERVICE, health.SERVING)
        return self

    @property
    def port(self) -> int:
        """The bound port (after start())."""
        if self._port is None:
            raise RuntimeError("LearnerServer.port: call start() first")
        return self._port

    def stop(self, grace: Optional[float] = None) -> None:
        """Reports NOT_SERVING, refuses new calls, lets calls in flight finish for up
        to `grace` seconds (None: cancels them at once), then returns. A learner method
        still running then is abandoned: its caller sees the call cancelled, and its
        thread (a daemon thread) does not keep the process from exiting."""
        server, self._server = self._server, None
        pool, self._pool = self._pool, None
        if server is None:
            return
        self.health.shutdown()
        server.stop(grace).wait()
        if pool is not None:
            if pool.busy:
                _log.warning("%d learner call(s) still running after the grace; "
                             "abandoned", pool.busy)
            pool.shutdown(wait=False)

    def __enter__(self) -> "LearnerServer":
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop(None)


def _exit_now(code: Any) -> None:
    """Exits the process as SystemExit(code) would from the main thread, but from any
    thread: a learner asked for it, and no one else will act on it."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    if code is None:
        os._exit(0)
    if isinstance(code, int):
        os._exit(code & 0xFF)
    print(code, file=sys.stderr, flush=True)  # as the interpreter does for a message
    os._exit(1)


def serve(learner: Learner, address: str, *, grace: float = 30.0, **server_options: Any) -> None:
    """Serves `learner` until SIGTERM or SIGINT, then drains for up to `grace` seconds.

    Prints "learner listening on <host>:<port>" once bound. Under a supervisor (with
    AGGREGATOR_WORKER_FD set) it also speaks the worker channel: after binding it sends
    the "_init" handshake and then the unsolicited
    WorkerReply{req_id: "", method: "_listening", data: {"port": <port>}}, and it
    answers requests with the learner's methods and attributes; "_shutdown" or the
    end of the channel drains and returns like a signal does. A bind failure under a
    channel is reported as INIT_FAILED. `server_options` go to LearnerServer.
    A learner method raising SystemExit (over gRPC or the channel) is answered, then
    serve() drains as for a signal and raises that SystemExit.
    """
    stop = threading.Event()
    exits: List[SystemExit] = []

    def on_exit(code: Any) -> None:
        exits.append(SystemExit(code))
        stop.set()

    stop_signals = {signal.SIGTERM, signal.SIGINT}
    for signo in stop_signals:
        signal.signal(signo, lambda *_: stop.set())
    # The kernel gives a process's signal to any thread that does not block it, and
    # only a signal that lands on the main thread wakes it from a wait: the threads
    # started from here on (gRPC's, the channel's, and theirs) are born blocking them.
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    try:
        server = LearnerServer(learner, address, **server_options)
        server.on_exit = on_exit
        channel = worker.WorkerChannel.from_env()
        try:
            server.start()
        except OSError as e:
            if channel is not None:
                channel.write(worker.init_reply(f"{type(e).__name__}: {e}"))
            raise
        host = address.rsplit(":", 1)[0]
        print(f"learner listening on {host}:{server.port}", flush=True)
        if channel is not None:
            channel.write(worker.init_reply())
            channel.write(worker.listening_reply(server.port))
            threading.Thread(target=_serve_channel_then_stop, name="worker-channel",
                             args=(channel, worker.Dispatcher(learner, server.lock), stop,
                                   on_exit),
                             daemon=True).start()
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stop_signals)  # a pending one lands now
    # Timed waits, for threads the caller started before serve(): a signal caught
    # by one of them runs its handler at the main thread's next wake-up.
    while not stop.wait(timeout=0.5):
        pass
    server.stop(grace)
    if exits:
        raise exits[0]


def _serve_channel_then_stop(channel: worker.WorkerChannel, dispatcher: worker.Dispatcher,
                             stop: threading.Event, on_exit: Callable[[Any], None]) -> None:
    try:
        exit_request = worker.serve_channel(channel, dispatcher)
    except worker.WorkerChannelError as e:
        print(f"learner: {e}", file=sys.stderr)
        exit_request = None
    if exit_request is not None:
        on_exit(exit_request.code)
    stop.set()
