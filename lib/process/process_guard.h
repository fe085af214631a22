// The process guard: a small process between a supervisor and a child that
// makes sure none of the child's descendants outlives it.
//
// A guarded child is started as `<guard program> --process-guard ... --
// <argv>` (see SubprocessOptions::guard_program); the guard starts <argv> as
// its own child, in its own process group (so the supervisor's signals to the
// group reach the child and its descendants as before), and is a child
// subreaper, so every orphaned descendant — even one that called setsid() —
// becomes its child. When the child exits, the guard SIGKILLs and reaps every
// remaining descendant, then exits with the child's status (the same code, or
// the same signal). When the supervisor dies (even by SIGKILL), the guard is
// told by PR_SET_PDEATHSIG and kills the whole tree. Signals sent to the guard
// itself are not passed on: the supervisor signals the process group.
//
// aggregatord runs the guard from its own binary (`aggregatord
// --process-guard`): main() hands those arguments to RunProcessGuard.
#ifndef LIB_PROCESS_PROCESS_GUARD_H_
#define LIB_PROCESS_PROCESS_GUARD_H_

#include "lib/process/subprocess.h"  // kProcessGuardFlag

namespace aggregator {

// Runs the guard; `argv` as main() got it (argv[1] is kProcessGuardFlag).
// Returns the exit code (when the child was killed by a signal, it raises that
// signal instead of returning).
int RunProcessGuard(int argc, char** argv);

}  // namespace aggregator

#endif  // LIB_PROCESS_PROCESS_GUARD_H_
