// Adopted children: processes that became this process's children because it
// is a child subreaper (PR_SET_CHILD_SUBREAPER) and their own parent ended —
// descendants of a worker that outlived it, even ones that called setsid().
// Every child a Subprocess starts is registered as its own; any other child is
// adopted, within a scope (below).
//
// Thread-safety: all functions may be called from any thread; the registry
// and the scans are serialized by one process-wide lock, so a child being
// started is never mistaken for an adopted one.
#ifndef LIB_PROCESS_ADOPTED_H_
#define LIB_PROCESS_ADOPTED_H_

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <vector>

#include "absl/status/status.h"

namespace aggregator {

// Makes this process the reaper of its orphaned descendants.
absl::Status BecomeChildSubreaper();

// Which unregistered children count as adopted.
enum class AdoptedScope {
  // Every one: a process guard, whose worker's descendants share its group.
  kAllChildren,
  // Those outside this process's own process group: the daemon's. A worker
  // runs in a group of its own, so its descendants are outside ours unless
  // one joins ours on purpose; a child a library forks (TSan's symbolizer)
  // stays in ours and belongs to that library, which waits for it itself.
  kOtherProcessGroups,
};

// Reaps the adopted children that have exited (zombies); returns how many.
int ReapExitedAdopted(AdoptedScope scope);

// SIGKILLs every adopted child and reaps it, again until none is left (their
// own children are adopted in turn) or `deadline`; returns how many.
int KillAdopted(std::chrono::steady_clock::time_point deadline,
                AdoptedScope scope);

namespace process_internal {
// Runs `fork_and_register` (which must register the child it forks) under the
// registry lock, so that no scan sees the child before it is registered.
pid_t ForkRegistered(const std::function<pid_t()>& fork_child);
void Unregister(pid_t pid);
}  // namespace process_internal

}  // namespace aggregator

#endif  // LIB_PROCESS_ADOPTED_H_
