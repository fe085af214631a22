// Adopted children: processes that became this process's children because it
// is a child subreaper (PR_SET_CHILD_SUBREAPER) and their own parent ended —
// descendants of a worker that outlived it, even ones that called setsid().
// Every child a Subprocess starts is registered as its own; any other child is
// adopted.
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

// Reaps the adopted children that have exited (zombies); returns how many.
int ReapExitedAdopted();

// SIGKILLs every adopted child and reaps it, again until none is left (their
// own children are adopted in turn) or `deadline`; returns how many.
int KillAdopted(std::chrono::steady_clock::time_point deadline);

namespace process_internal {
// Runs `fork_and_register` (which must register the child it forks) under the
// registry lock, so that no scan sees the child before it is registered.
pid_t ForkRegistered(const std::function<pid_t()>& fork_child);
void Unregister(pid_t pid);
}  // namespace process_internal

}  // namespace aggregator

#endif  // LIB_PROCESS_ADOPTED_H_
