#!/usr/bin/env bash
# The Python stubs generate from proto/ and import under Debian's python3-grpcio.
set -euo pipefail
out="${TEST_TMPDIR:-$(mktemp -d)}/py"
tools/gen_python_stubs "$out"
PYTHONPATH="$out" /usr/bin/python3 - <<'PY'
from proto import learner_pb2, learner_pb2_grpc, admin_pb2_grpc, worker_pb2
req = learner_pb2.LearnRequest(plan_id="p", samples=[learner_pb2.Sample(data=b"x")])
assert learner_pb2.LearnRequest.FromString(req.SerializeToString()) == req
assert hasattr(learner_pb2_grpc, "LearnerStub")
assert hasattr(admin_pb2_grpc, "AggregatorAdminStub")
assert worker_pb2.WorkerError.KIND_TIMEOUT == 4
print("python stubs OK")
PY
