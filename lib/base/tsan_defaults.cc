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
// deadlock graph) that are not races. A race with a frame in one of their
// libraries is skipped. Their inline header code compiled into ours is not
// skipped by name (a `race:grpc::` or `race:absl::` matched any frame, so it
// also hid our own callbacks run inside gRPC's call stack: the AdmissionLease
// use-after-free), but for the one frame named below. gRPC's own threads (its
// timer manager's, made by libgpr) are joined by gRPC's shutdown, which runs on
// a thread of its own and may not be done when a test process exits: a thread
// gRPC made is not reported as a leak; one this project makes still is.
// spdlog's library is Debian's too, and it exports its copies of
// std::shared_ptr's out-of-line code, which the other libraries' threads then
// run: gRPC's timer thread releasing one of its shared_ptrs at exit showed as a
// race in libspdlog.so (free, then only
// _Sp_counted_base::_M_release_last_use_cold; fan_out_test, 2 of 10 runs).
//
// CallOpClientRecvStatus::FinishOp (grpcpp/impl/call_op_set.h, inline): a
// blocking call's error message and debug string are made by gRPC core on
// whichever thread polled the call's completion (aggregator_server_test,
// "Health agrees with the calls when min_learners is 0": the learner pool's
// thread), and read, then freed, by the caller after Pluck; the hand-over is
// gRPC's own lock (2 reports in 2 of 3 runs without this line).
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
         "race:grpc::internal::CallOpClientRecvStatus::FinishOp\n";
}

#endif
#endif
