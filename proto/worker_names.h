// The worker protocol's names besides its messages (worker.proto): the
// reserved methods, the listening announcement and how a process child finds
// its channel. One definition for the supervisor, the daemon's workers and the
// tools; tests/proto/worker_names_test checks them against the Python worker
// runtime (tools/python/learner_aggregator/worker.py), so the sides cannot
// drift apart.
#ifndef PROTO_WORKER_NAMES_H_
#define PROTO_WORKER_NAMES_H_

#include <cstdint>

namespace aggregator {

// Reserved methods: read an attribute (args[0] names it), end the serving
// loop (not answered).
inline constexpr char kGetAttrMethod[] = "_getattr";
inline constexpr char kShutdownMethod[] = "_shutdown";
// The start-up handshake reply's method.
inline constexpr char kInitMethod[] = "_init";
// The unsolicited announcement of a learner worker's bound port, and the
// field of its data that holds the port.
inline constexpr char kListeningMethod[] = "_listening";
inline constexpr char kListeningPortField[] = "port";

// The environment variable naming the child's end of its channel.
inline constexpr char kWorkerFdEnv[] = "AGGREGATOR_WORKER_FD";
// The fd number a process child finds its channel on.
inline constexpr int kWorkerChildFd = 3;
// A frame larger than this is a protocol error unless the channel says
// otherwise (it guards against reading a corrupt length as a huge
// allocation).
inline constexpr uint32_t kDefaultMaxFrameBytes = 256u << 20;

}  // namespace aggregator

#endif  // PROTO_WORKER_NAMES_H_
