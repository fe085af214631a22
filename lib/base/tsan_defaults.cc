// ThreadSanitizer's defaults for every binary that uses lib/base/mutex.h (all
// of this project's), built in so `bazel test --config=tsan` and the daemons
// and learners the tests start all run with them. Compiled to nothing in every
// other build.
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)

// die_after_fork=0: Subprocess forks on its spawner thread while others run and
// the child only execs; a test also forks the test process itself.
extern "C" const char* __tsan_default_options() { return "die_after_fork=0"; }

// Debian's gRPC, protobuf, abseil, yaml-cpp and OpenSSL are not built with
// -fsanitize=thread: their own locks and atomics are invisible to TSan, so it
// reports races among their threads (gRPC's pollers and call ops, absl's
// deadlock graph) that are not races. A race with a frame of theirs (their
// libraries, or their inline header code in ours) is skipped; a race in this
// project's code alone is still reported, and this project's locks are seen
// (mutex.h). gRPC's own threads (its timer manager's, made by libgpr) are
// joined by gRPC's shutdown, which runs on a thread of its own and may not be
// done when a test process exits: a thread gRPC made is not reported as a
// leak; one this project makes still is. spdlog's library is Debian's too,
// and it exports its copies of std::shared_ptr's out-of-line code, which the
// other libraries' threads then run: gRPC's timer thread releasing one of its
// shared_ptrs at exit showed as a race in libspdlog.so (free, then only
// _Sp_counted_base::_M_release_last_use_cold; fan_out_test, 2 of 10 runs).
extern "C" const char* __tsan_default_suppressions() {
  return "thread:libgpr.so\n"
         "race:libgrpc.so\n"
         "race:libgrpc++.so\n"
         "race:libgpr.so\n"
         "race:libgrpc++_reflection.so\n"
         "race:libabsl_\n"
         "race:libprotobuf.so\n"
         "race:libupb.so\n"
         "race:libyaml-cpp.so\n"
         "race:libcrypto.so\n"
         "race:libssl.so\n"
         "race:libspdlog.so\n"
         "race:grpc::\n"
         "race:grpc_core::\n"
         "race:grpc_event_engine::\n"
         "race:absl::\n"
         "race:YAML::\n"
         "race:google::protobuf::\n";
}

#endif
#endif
