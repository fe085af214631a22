// One start of a supervisor's child (lib/supervisor/supervisor.h). Private to
// lib/supervisor.
#ifndef LIB_SUPERVISOR_INCARNATION_H_
#define LIB_SUPERVISOR_INCARNATION_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "lib/base/mutex.h"
#include "lib/process/subprocess.h"
#include "lib/supervisor/thread_channel.h"
#include "lib/supervisor/worker_channel.h"
#include "proto/worker.pb.h"

namespace aggregator {
namespace supervisor_internal {

// One start of a child: its process or thread and its channel. Replaced as a
// whole by a restart, so nothing of an old start can reach a new one.
//
// Ownership: shared by the Child record and the reader's poll targets; fds are
// closed when the last reference goes.
struct Incarnation {
  ~Incarnation() {
    // Stop paths join; a thread that did not stop owns what it uses.
    if (thread.joinable()) thread.detach();
  }

  bool is_process = false;
  int generation = 0;  // set before the incarnation is visible

  // A process child. pid, pidfd (the Subprocess's own) and channel are fixed
  // once visible.
  pid_t pid = -1;
  int pidfd = -1;
  std::unique_ptr<WorkerChannel> channel;  // reads: the reader role only
  Mutex write_mu;                          // serializes writes to `channel`
  v1::WorkerRequest request ABSL_GUARDED_BY(write_mu);  // reused
  // Guards `process`; held only for calls that do not block.
  Mutex process_mu;
  std::unique_ptr<Subprocess> process ABSL_GUARDED_BY(process_mu);

  // A thread child.
  std::shared_ptr<ThreadChannel> thread_channel;
  std::thread thread;  // joined or detached under Supervisor::lifecycle_mu_

  // Guarded by Supervisor::mu_.
  bool initialized = false;  // the init handshake (or any reply) arrived
  bool ended = false;        // recorded as over; its pending requests failed
  std::string stop_reason;   // "was restarted": a stop is under way
  std::string kill_reason;   // why the supervisor killed it on its own
  std::optional<ExitStatus> exit_status;

  // The reader role's own state.
  bool channel_closed = false;  // end of stream or error seen: stop polling
  bool reaped = false;
  // Set when the channel closed and the process had not yet ended: it is
  // killed if still running then.
  std::optional<RealClock::time_point> exit_grace_end;
};

}  // namespace supervisor_internal
}  // namespace aggregator

#endif  // LIB_SUPERVISOR_INCARNATION_H_
