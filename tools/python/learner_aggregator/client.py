"""AggregatorClient: a coordinator's view of an aggregator (or of any one learner)."""

from __future__ import annotations

from typing import (Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple, Union,
                    cast)

import grpc
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from learner_aggregator import wire
from learner_aggregator._proto import (
    admin_pb2, admin_pb2_grpc, health_pb2, health_pb2_grpc, learner_pb2, learner_pb2_grpc)
from learner_aggregator.errors import AggregatorError, failed_learners_from
from learner_aggregator.learner import DataDemand, LearnResult, Resource, TaskReply
from learner_aggregator.samples import Sample
from learner_aggregator.structs import from_list, from_struct, from_value, to_struct


def message_to_dict(message: Message) -> Dict[str, Any]:
    """Every field of a reply as plain Python: Structs as dicts, int64 as int, enums by
    name ("LEARNER_STATE_READY"), Durations as float seconds, unset fields as their
    defaults."""
    result: Dict[str, Any] = {}
    for name, repeated, convert in _fields(message.DESCRIPTOR):
        value = getattr(message, name)
        if repeated:
            result[name] = [convert(item) for item in value] if convert else list(value)
        else:
            result[name] = convert(value) if convert else value
    return result


_Converter = Optional[Callable[[Any], Any]]
# Per message type, each field's name, whether it repeats and how its values convert
# (None: as they are), worked out once: every reply of the hot path goes through here.
_field_plans: Dict[Descriptor, List[Tuple[str, bool, _Converter]]] = {}


def _fields(descriptor: Descriptor) -> List[Tuple[str, bool, _Converter]]:
    plan = _field_plans.get(descriptor)
    if plan is None:
        plan = [(field.name, field.label == FieldDescriptor.LABEL_REPEATED,
                 _converter(field)) for field in descriptor.fields]
        _field_plans[descriptor] = plan
    return plan


def _converter(field: FieldDescriptor) -> _Converter:
    if field.type == FieldDescriptor.TYPE_ENUM:
        names = field.enum_type.values_by_number
        return lambda number: names[number].name
    if field.type != FieldDescriptor.TYPE_MESSAGE:
        return None
    by_type: Dict[str, Callable[[Any], Any]] = {
        "google.protobuf.Struct": from_struct,
        "google.protobuf.Value": from_value,
        "google.protobuf.ListValue": from_list,
        "google.protobuf.Duration": lambda d: d.seconds + d.nanos / 1e9,
    }
    return by_type.get(field.message_type.full_name, message_to_dict)


def _error(method: str, e: Any) -> AggregatorError:
    """AggregatorError from a failed call (a grpc.RpcError that is a grpc.Call), with
    the failed learners its trailing metadata carries."""
    return AggregatorError(method, e.code(), e.details() or "",
                           failed_learners_from(e.trailing_metadata()))


class AggregatorClient:
    """Calls the Learner service at `address` ("host:port") and AggregatorAdmin at
    `admin_address` (the daemon's admin.listen; status() only; default: the host of
    `address` at port 22274, the default admin.listen).

    `tls_ca` (a PEM file: the CA to verify the aggregator with), `tls_cert` and
    `tls_key` (our certificate, for mTLS) and `tls_server_name` (the name its
    certificate must carry) call over TLS, as aggregatorctl's --tls-* flags.

    learn() sends a batch of more than `stream_threshold` bytes by LearnStream, in
    messages of about `stream_message_bytes`, so that an aggregator passes each learner
    its slice while the rest of the batch is still on its way (aggregatorctl's
    --stream-threshold and --stream-message-bytes).

    Every call has a deadline of `timeout` seconds and returns its reply as a dict
    (message_to_dict); a failed call raises AggregatorError with the status code and
    the server's details. Thread-safe; close() (or `with`) releases the channel.
    """

    def __init__(self, address: str, timeout: float = 60.0, *,
                 admin_address: Optional[str] = None,
                 max_message_bytes: int = 1 << 30, tls_ca: Optional[str] = None,
                 tls_cert: Optional[str] = None, tls_key: Optional[str] = None,
                 tls_server_name: Optional[str] = None,
                 stream_threshold: int = 1 << 20,
                 stream_message_bytes: int = 1 << 20) -> None:
        if (tls_cert is None) != (tls_key is None):
            raise ValueError("tls_cert and tls_key go together")
        self._credentials: Optional[grpc.ChannelCredentials] = None
        if tls_ca or tls_cert or tls_server_name:
            def read(path: Optional[str]) -> Optional[bytes]:
                if path is None:
                    return None
                with open(path, "rb") as f:
                    return f.read()
            self._credentials = grpc.ssl_channel_credentials(
                root_certificates=read(tls_ca), private_key=read(tls_key),
                certificate_chain=read(tls_cert))
        self._server_name = tls_server_name
        self.address = address
        if admin_address is None:
            admin_address = address.rsplit(":", 1)[0] + ":22274"
        self.admin_address = admin_address
        self.timeout = timeout
        self.stream_threshold = stream_threshold
        self.stream_message_bytes = stream_message_bytes
        self._max_message_bytes = max_message_bytes
        self._channel = self._open_channel(address)
        # The generated *_pb2_grpc modules are untyped (Debian has no grpc stubs).
        self._learner: Any = learner_pb2_grpc.LearnerStub(  # type: ignore[no-untyped-call]
            self._channel)
        # Learn and LearnStream with requests as bytes (learn() writes them itself).
        self._learn_bytes = self._channel.unary_unary(
            "/aggregator.v1.Learner/Learn", request_serializer=None,
            response_deserializer=learner_pb2.LearnReply.FromString)
        self._learn_stream = self._channel.stream_unary(
            "/aggregator.v1.Learner/LearnStream", request_serializer=None,
            response_deserializer=learner_pb2.LearnReply.FromString)
        # Channels connect on first use: an admin listener never called is never dialled.
        self._admin_channel = self._open_channel(admin_address)
        self._admin: Any = admin_pb2_grpc.AggregatorAdminStub(  # type: ignore[no-untyped-call]
            self._admin_channel)

    def _open_channel(self, address: str) -> grpc.Channel:
        """A channel to `address`, over TLS when it was asked for."""
        options: List[Tuple[str, Union[int, str]]] = [
            ("grpc.max_send_message_length", self._max_message_bytes),
            ("grpc.max_receive_message_length", self._max_message_bytes),
        ]
        if self._credentials is None:
            return grpc.insecure_channel(address, options=options)
        if self._server_name:
            options.append(("grpc.ssl_target_name_override", self._server_name))
        return grpc.secure_channel(address, self._credentials, options=options)

    def _call(self, name: str, rpc: Any, request: Union[Message, bytes]) -> Dict[str, Any]:
        try:
            return message_to_dict(rpc(request, timeout=self.timeout))
        except grpc.RpcError as e:
            raise _error(name, e) from None

    def resource(self) -> Resource:
        """{"gpus", "learners"}: summed over the aggregator's ready learners;
        "learn_stream": whether it serves LearnStream (an aggregator does)."""
        return cast(Resource, self._call("GetResource", self._learner.GetResource,
                                         learner_pb2.GetResourceRequest()))

    def start_task(self, info: Dict[str, Any]) -> TaskReply:
        """Starts a task on every learner; {"message"}."""
        return cast(TaskReply, self._call(
            "StartTask", self._learner.StartTask,
            learner_pb2.StartTaskRequest(task_info=to_struct(info))))

    def get_data(self) -> DataDemand:
        """The next demand: {"batch_size" (the total), "cur_learner_iter", "task_id",
        "buffer_id", "plan_id" (pass it to learn), "extra", "membership"
        ({"generation", "members"}: the learners the plan is split over)}."""
        return cast(DataDemand, self._call("GetData", self._learner.GetData,
                                           learner_pb2.GetDataRequest()))

    def learn(self, samples: Iterable[Sample], plan_id: Optional[str] = None) -> LearnResult:
        """Trains on `samples` (as many as get_data demanded); {"info": the merged
        Learn info, "task_id", "buffer_id"}. Over `stream_threshold` bytes by LearnStream,
        unless the address is a plain learner that does not serve it."""
        # The request as bytes, written straight from the samples (wire.encode_sample):
        # a protobuf message per sample, with its Struct meta, cost more than the call.
        encoded = [wire.encode_sample(sample) for sample in samples]
        plan = wire.encode_plan_id(plan_id or "")
        if sum(map(len, encoded)) + len(plan) > self.stream_threshold:
            try:
                return cast(LearnResult, message_to_dict(self._learn_stream(
                    self._stream_messages(encoded, plan), timeout=self.timeout)))
            except grpc.RpcError as e:
                # An aggregator (it names itself in its metadata) serves LearnStream:
                # its UNIMPLEMENTED is a learner's, and some learners may have trained.
                aggregator = any(key == "x-aggregator-id"
                                 for key, _ in (e.initial_metadata() or ()))
                if e.code() != grpc.StatusCode.UNIMPLEMENTED or aggregator:
                    raise _error("LearnStream", e) from None
        encoded.append(plan)
        return cast(LearnResult, self._call("Learn", self._learn_bytes, b"".join(encoded)))

    def _stream_messages(self, encoded: List[bytes], plan: bytes) -> Iterator[bytes]:
        """The LearnStream messages of a batch (LearnRequests as bytes): consecutive
        samples of at most stream_message_bytes (a larger one alone), the plan_id in
        the first."""
        chunk: List[bytes] = [plan]
        size = 0
        first = True
        for sample in encoded:
            if size and size + len(sample) > self.stream_message_bytes:
                yield b"".join(chunk)
                first, chunk, size = False, [], 0
            chunk.append(sample)
            size += len(sample)
        if size or first:
            yield b"".join(chunk)

    def close_task(self) -> TaskReply:
        """Ends the task on every learner; {"message"}."""
        return cast(TaskReply, self._call("CloseTask", self._learner.CloseTask,
                                          learner_pb2.CloseTaskRequest()))

    def serving(self) -> bool:
        """True when `address` reports SERVING on grpc.health.v1 (an aggregator: its
        min_learners are ready), or has no health service (a plain learner that
        answers is ready); False while it is not serving; AggregatorError when it
        cannot be reached."""
        stub = health_pb2_grpc.HealthStub(self._channel)  # type: ignore[no-untyped-call]
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(), timeout=self.timeout)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.UNIMPLEMENTED:
                return True
            raise AggregatorError("Check", e.code(), e.details() or "") from None
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)

    def status(self) -> Dict[str, Any]:
        """The aggregator's admin status: {"learners": [{"id", "address", "state", ...}],
        "workers": [{"name", "index", "pid", "state", "restarts", ...}], "ready",
        "uptime" (seconds), "config_generation", "config_path", "version"}."""
        return self._call("GetStatus", self._admin.GetStatus, admin_pb2.GetStatusRequest())

    def close(self) -> None:
        self._channel.close()
        self._admin_channel.close()

    def __enter__(self) -> "AggregatorClient":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()
