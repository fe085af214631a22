// What tools/soak checks, apart from running things: whether a Learn reply is
// a correctly merged, correctly ordered info for the batch sent; whether a
// failed call's status names what failed; what /proc says about a process
// (state, parent, start time, fds, threads); the soak's figures, its pass/fail
// verdicts and the table it prints.
//
// Pure functions (and /proc reads): unit-tested in soak_checks_test.cc.
#ifndef TOOLS_SOAK_SOAK_CHECKS_H_
#define TOOLS_SOAK_SOAK_CHECKS_H_

#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proto/learner.pb.h"

namespace aggregator::soak {

// OK when `reply` answers `request` as the aggregator must over example
// learners (tests/testing/example_learner_service.h):
// info.priority_info.priority and info.priority_info.replay_unique_id have
// exactly one entry per sample, in sample order (priority i is
// SamplePriority(data i), id i is sample i's meta.replay_unique_id), and
// info.received (one count per learner) adds up to the batch. Otherwise says
// what is wrong, at which index.
absl::Status CheckLearnReply(const aggregator::v1::LearnRequest& request,
                             const aggregator::v1::LearnReply& reply);

// Whether a failed call's status says what failed: a non-empty message that
// names one of `learner_ids`, or a condition of the aggregator itself (no
// plan, not enough learners ready, shutting down). gRPC's own texts
// ("Deadline Exceeded", "Socket closed", ...) name nothing.
bool NamesWhatFailed(const grpc::Status& status,
                     const std::vector<std::string>& learner_ids);

// One line of /proc/<pid>/stat.
struct ProcInfo {
  pid_t pid = 0;
  pid_t ppid = 0;
  char state = '?';  // R, S, D, T (stopped), Z (zombie), ...
  std::string comm;
  uint64_t start_time = 0;  // clock ticks after boot: tells reused pids apart
};
// Parses the text of /proc/<pid>/stat (comm may hold spaces and parentheses).
std::optional<ProcInfo> ParseProcStat(const std::string& text);
// Reads /proc/<pid>/stat; nullopt when the process does not exist.
std::optional<ProcInfo> ReadProc(pid_t pid);
// Every process in /proc (those that vanish while being read are skipped).
std::vector<ProcInfo> ListProcs();
// Whether the very process `info` describes (same pid and start time) still
// exists and is not a zombie.
bool StillRunning(const ProcInfo& info);
// Entries of /proc/<pid>/fd, or -1.
int CountFds(pid_t pid);
// The Threads: field of /proc/<pid>/status, or -1.
int CountThreads(pid_t pid);
// VmRSS of /proc/<pid>/status in KiB, or -1.
int64_t RssKiB(pid_t pid);
// The threads of `pid` by name (/proc/<pid>/task/*/comm).
std::map<std::string, int> ThreadNames(pid_t pid);
// Whether a thread of this name belongs to one of gRPC core's own pools
// (executors, event engine, timer manager). These grow under load up to a bound
// and keep their idle threads, so they are held to a bound, not a baseline.
bool IsGrpcPoolThread(const std::string& name);
// The threads in `threads` (by name) that are, or are not, gRPC pool threads.
int CountThreads(const std::map<std::string, int>& threads, bool grpc_pools);
// "name a -> b" for every name whose count differs, or "".
std::string ThreadChanges(const std::map<std::string, int>& before,
                          const std::map<std::string, int>& after);

// What a soak run measured.
struct Figures {
  int64_t steps_requested = 0;
  int64_t steps_run = 0;
  bool time_bound_hit = false;
  int64_t steps_ok = 0;
  // Failed steps by "<RPC> <CODE>" ("Learn DEADLINE_EXCEEDED"), and one
  // message of each, as an example.
  std::map<std::string, int64_t> failed_by_status;
  std::map<std::string, std::string> example_message;
  // Learn returned OK but the info was wrong (see CheckLearnReply).
  int64_t bad_infos = 0;
  std::string first_bad_info;
  // Failed calls whose status names nothing (see NamesWhatFailed).
  int64_t unclear_failures = 0;
  std::string first_unclear;
  double max_step_ms = 0;
  double p50_step_ms = 0;
  double p99_step_ms = 0;
  double max_call_over_deadline_ms = 0;  // the latest a call came back
  int64_t hangs = 0;                     // calls later than deadline + slack
  int64_t recovery_steps = 0;
  int64_t recovery_ok = 0;
  bool recovered = false;  // every learner and worker back after the chaos
  std::string recovery_error;
  int64_t rss_baseline_kib = 0;
  int64_t rss_end_kib = 0;
  int64_t rss_peak_kib = 0;
  int fds_baseline = 0;
  int fds_end = 0;
  // The daemon's own threads (not gRPC's pools): they must return.
  int threads_baseline = 0;
  int threads_end = 0;
  // gRPC's pool threads at the end, and the most they may be.
  int pool_threads_end = 0;
  int pool_threads_limit = 0;
  std::string thread_changes;  // by name (see ThreadChanges)
  // RSS at each tenth of the chaos steps: "step:KiB".
  std::vector<std::pair<int64_t, int64_t>> rss_samples;
  int lingering_zombies = 0;  // seen in state Z on two samples 2 s apart
  int zombies_end = 0;        // the daemon's descendants in state Z at the end
  bool daemon_exit_ok = false;
  std::string daemon_exit;
  int leftovers = 0;  // soak-started processes alive after the daemon stopped
  std::string leftover_list;
  std::map<std::string, int64_t> chaos_events;
  double wall_seconds = 0;
};

struct Limits {
  double max_rss_growth_percent = 10;
  // fds and threads must come back to baseline + these.
  int fd_slack = 0;
  int thread_slack = 0;
};

struct Verdict {
  std::string check;
  bool passed = false;
  std::string detail;
};

// Every check of the soak, passed or not.
std::vector<Verdict> Evaluate(const Figures& figures, const Limits& limits);
double RssGrowthPercent(const Figures& figures);
// The figures and the verdicts, as the table the soak prints.
std::string FormatTable(const Figures& figures,
                        const std::vector<Verdict>& verdicts);

}  // namespace aggregator::soak

#endif  // TOOLS_SOAK_SOAK_CHECKS_H_
