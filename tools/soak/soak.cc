// soak: a chaos soak of aggregatord, bounded in steps and time.
//
// Starts a real aggregatord on loopback with 4 supervised example learners as
// `workers:` (lrn-a-0, lrn-a-1 demanding 6 samples each, lrn-b-0, lrn-b-1
// demanding 10), then runs --steps GetData+Learn steps as a coordinator while
// a chaos thread, at random (mean gap --chaos-interval-ms, at most
// --max-faulty learners faulty at once):
//   kill     SIGKILLs a learner process (or, one time in five, its guard);
//   hang     SIGSTOPs a learner, SIGCONTs it 0.3-2.5 s later;
//   slow     makes a learner's Learn or GetData slow for 0.5-3 s (mostly
//            within the daemon's call_timeout, sometimes past it);
//   err      makes a learner's Learn or GetData fail for 0.3-2 s;
//   sighup   sends the daemon SIGHUP (half the time after rewriting the file
//            with another call_timeout).
// slow and err go through each learner's --fault-file; learner PIDs come from
// AggregatorAdmin.GetStatus (the guard's pid) and /proc (the guard's child).
//
// Checks (tools/soak/soak_checks.h): every step succeeds with a merged info
// whose per-sample lists have batch_size entries in sample order, or fails with
// a status naming what failed; no call returns later than its deadline + slack;
// after the chaos every learner comes back and --recovery-steps steps all
// succeed; the daemon's RSS grows at most 10 % from the end of the warm-up to
// the end; its fd and thread counts return to their pre-chaos baseline; no
// descendant of the daemon stays a zombie; after SIGTERM the daemon exits 0
// and no process this soak saw (guards, learners) remains, and none was
// orphaned to the soak (a child subreaper). Prints a table; exits 1 when a
// check fails, 2 when the soak cannot run.
//
//   bazel run //tools:soak -- --steps 10000 --max-seconds 3600 --seed 7
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/base/grpc_status.h"
#include "lib/base/mutex.h"
#include "proto/admin.grpc.pb.h"
#include "proto/learner.grpc.pb.h"
#include "tests/testing/synthetic_batch.h"
#include "tools/bench/bench_processes.h"
#include "tools/bench/tool_paths.h"
#include "tools/soak/soak_checks.h"

namespace aggregator::soak {
namespace {

namespace pb = aggregator::v1;
using Steady = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct Options {
  int64_t steps = 1000;
  double max_seconds = 600;
  uint64_t seed = 1;
  int chaos_interval_ms = 300;
  int max_faulty = 2;
  int64_t sample_bytes = 256;
  int call_timeout_ms = 1000;
  int deadline_ms = 5000;
  int slack_ms = 1000;
  int64_t warmup_steps = -1;  // -1: steps / 10, from 20 to 500
  int recovery_steps = 20;
  int pause_ms = 50;
  double max_rss_growth = 10;
  int fd_slack = 0;
  int thread_slack = 0;
  std::string daemon;
  std::string learner;
  std::vector<std::string> kinds = {"kill", "hang", "slow", "err", "sighup"};
  std::vector<std::string> daemon_env;  // KEY=VALUE
  bool verbose = false;
};

// The 4 learners: worker name, replica index, batch size each demands.
struct Replica {
  const char* worker;
  int index;
  int batch_size;
  std::string id() const { return absl::StrCat(worker, "-", index); }
};
const Replica kReplicas[] = {
    {"lrn-a", 0, 6}, {"lrn-a", 1, 6}, {"lrn-b", 0, 10}, {"lrn-b", 1, 10}};
constexpr int kReplicaCount = 4;

std::vector<std::string> LearnerIds() {
  std::vector<std::string> ids;
  for (const Replica& r : kReplicas) ids.push_back(r.id());
  return ids;
}

// Whether `n` is the sum of the demands of some non-empty set of learners.
bool PossibleBatch(int64_t n) {
  for (int mask = 1; mask < (1 << kReplicaCount); ++mask) {
    int64_t sum = 0;
    for (int i = 0; i < kReplicaCount; ++i) {
      if (mask & (1 << i)) sum += kReplicas[i].batch_size;
    }
    if (sum == n) return true;
  }
  return false;
}

double Ms(Steady::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

std::chrono::system_clock::time_point DeadlineIn(milliseconds ms) {
  return std::chrono::system_clock::now() + ms;
}

void Log(const Options& options, const std::string& text) {
  if (!options.verbose) return;
  std::fprintf(stderr, "soak: %s\n", text.c_str());
}

// A port p with p .. p+3 free on loopback right now.
absl::StatusOr<int> FreePorts(int count) {
  for (int attempt = 0; attempt < 200; ++attempt) {
    std::vector<int> fds;
    int first = 0;
    bool all = true;
    for (int i = 0; i < count && all; ++i) {
      const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0) return absl::ErrnoToStatus(errno, "socket");
      fds.push_back(fd);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      addr.sin_port = htons(i == 0 ? 0 : first + i);
      all = (i == 0 || first + i <= 65535) &&
            bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
      if (all && i == 0) {
        socklen_t len = sizeof(addr);
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
        first = ntohs(addr.sin_port);
      }
    }
    for (int fd : fds) close(fd);
    if (all) return first;
  }
  return absl::UnavailableError("no 4 consecutive free loopback ports");
}

std::string ConfigYaml(const Options& options, const std::string& dir,
                       int port_base, int call_timeout_ms) {
  std::string yaml = "listen: \"127.0.0.1:0\"\nworkers:\n";
  for (int w = 0; w < 2; ++w) {
    const Replica& first = kReplicas[2 * w];
    absl::StrAppend(&yaml, "  - name: ", first.worker, "\n    command: [\"",
                    options.learner,
                    "\", --listen, \"127.0.0.1:{port}\", --batch-size, \"",
                    first.batch_size, "\", --fault-file, \"", dir,
                    "/fault-{name}-{index}\"]\n",
                    "    replicas: 2\n"
                    "    port_base: ",
                    port_base + 2 * w,
                    "\n"
                    "    learner: true\n"
                    "    restart: always\n"
                    "    backoff: {initial: 50ms, multiplier: 2, max: 1s}\n"
                    "    max_restarts: 1000000\n"
                    "    restart_window: 60s\n"
                    "    min_uptime: 300ms\n"
                    "    stop_timeout: 3s\n");
  }
  absl::StrAppend(&yaml,
                  "min_learners: 1\n"
                  "connect:\n"
                  "  timeout: 10s\n"
                  "  attempt_timeout: 2s\n"
                  "  backoff: {initial: 20ms, multiplier: 1.6, jitter: 0.2, "
                  "max: 250ms}\n"
                  "call_timeout: ",
                  call_timeout_ms,
                  "ms\n"
                  "drain_timeout: 5s\n"
                  "metrics:\n"
                  "  listen: \"127.0.0.1:0\"\n"
                  "admin:\n"
                  "  listen: \"127.0.0.1:0\"\n"
                  "log:\n"
                  "  level: info\n");
  return yaml;
}

// Writes `content` to `path` through a rename, so a reader never sees half.
absl::Status WriteAtomically(const TempDir& dir, const std::string& name,
                             const std::string& content) {
  auto temp = dir.Write(name + ".tmp", content);
  if (!temp.ok()) return temp.status();
  const std::string path = absl::StrCat(dir.path(), "/", name);
  if (rename(temp->c_str(), path.c_str()) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("rename to ", path));
  }
  return absl::OkStatus();
}

// What the soak knows about the running daemon; shared by the coordinator,
// the chaos thread and the watchdog.
class World {
 public:
  World(const Options& options, TempDir dir, int port_base)
      : options_(options), dir_(std::move(dir)), port_base_(port_base) {}

  const Options& options() const { return options_; }
  const TempDir& dir() const { return dir_; }
  int port_base() const { return port_base_; }
  std::string config_path() const { return dir_.path() + "/aggregator.yaml"; }

  absl::Status WriteConfig(int call_timeout_ms) {
    return WriteAtomically(
        dir_, "aggregator.yaml",
        ConfigYaml(options_, dir_.path(), port_base_, call_timeout_ms));
  }

  void Connect(pid_t daemon_pid, const std::string& address,
               const std::string& admin_address) {
    daemon_pid_ = daemon_pid;
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(64 << 20);
    channel_ = grpc::CreateCustomChannel(
        address, grpc::InsecureChannelCredentials(), args);
    learner_ = pb::Learner::NewStub(channel_);
    // Its own channel: admin calls do not queue behind a slow Learn.
    admin_ = pb::AggregatorAdmin::NewStub(
        grpc::CreateChannel(admin_address, grpc::InsecureChannelCredentials()));
  }
  pid_t daemon_pid() const { return daemon_pid_; }
  pb::Learner::Stub& learner() { return *learner_; }

  absl::StatusOr<pb::AggregatorStatus> Status() {
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(milliseconds(3000)));
    pb::AggregatorStatus status;
    const grpc::Status rpc =
        admin_->GetStatus(&context, pb::GetStatusRequest(), &status);
    if (!rpc.ok()) {
      return absl::Status(static_cast<absl::StatusCode>(rpc.error_code()),
                          absl::StrCat("GetStatus: ", rpc.error_message()));
    }
    return status;
  }

  // The processes of replica r right now: its guard (the worker pid the daemon
  // reports) and the guard's child, the learner. Each is remembered for the
  // leftover check.
  struct ReplicaProcs {
    std::optional<ProcInfo> guard;
    std::optional<ProcInfo> learner;
  };
  std::vector<ReplicaProcs> Processes(const pb::AggregatorStatus& status,
                                      const std::vector<ProcInfo>& procs) {
    std::vector<ReplicaProcs> out(kReplicaCount);
    for (const pb::WorkerStatus& worker : status.workers()) {
      for (int r = 0; r < kReplicaCount; ++r) {
        if (worker.name() != kReplicas[r].worker ||
            worker.index() != kReplicas[r].index || worker.pid() <= 0) {
          continue;
        }
        for (const ProcInfo& p : procs) {
          if (p.pid == worker.pid() && p.ppid == daemon_pid_) out[r].guard = p;
        }
        if (!out[r].guard.has_value()) continue;
        for (const ProcInfo& p : procs) {
          if (p.ppid == worker.pid() && p.state != 'Z') out[r].learner = p;
        }
      }
    }
    MutexLock lock(&mu_);
    for (const ReplicaProcs& r : out) {
      if (r.guard) seen_[{r.guard->pid, r.guard->start_time}] = *r.guard;
      if (r.learner)
        seen_[{r.learner->pid, r.learner->start_time}] = *r.learner;
    }
    return out;
  }
  // Every process of the daemon's workers the soak saw (guards, learners).
  std::vector<ProcInfo> Seen() const {
    MutexLock lock(&mu_);
    std::vector<ProcInfo> out;
    for (const auto& [key, info] : seen_) out.push_back(info);
    return out;
  }
  // The daemon's descendants (its children and theirs).
  std::vector<ProcInfo> Descendants(const std::vector<ProcInfo>& procs) const {
    std::set<pid_t> parents = {daemon_pid_};
    std::vector<ProcInfo> out;
    for (bool grew = true; grew;) {
      grew = false;
      for (const ProcInfo& p : procs) {
        if (parents.count(p.ppid) != 0 && parents.insert(p.pid).second) {
          out.push_back(p);
          grew = true;
        }
      }
    }
    return out;
  }

  // Called by every phase as it makes progress; the watchdog reads it.
  void Progress(const std::string& phase) {
    MutexLock lock(&mu_);
    phase_ = phase;
    last_progress_ = Steady::now();
  }
  std::pair<std::string, Steady::time_point> LastProgress() const {
    MutexLock lock(&mu_);
    return {phase_, last_progress_};
  }

 private:
  const Options& options_;
  const TempDir dir_;
  const int port_base_;
  pid_t daemon_pid_ = -1;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pb::Learner::Stub> learner_;
  std::unique_ptr<pb::AggregatorAdmin::Stub> admin_;

  mutable Mutex mu_;
  std::map<std::pair<pid_t, uint64_t>, ProcInfo> seen_ ABSL_GUARDED_BY(mu_);
  std::string phase_ ABSL_GUARDED_BY(mu_) = "start-up";
  Steady::time_point last_progress_ ABSL_GUARDED_BY(mu_) = Steady::now();
};

// The chaos thread: injects one fault at a time at random moments, ends each
// when its time is up, and watches the daemon's descendants for zombies.
class Chaos {
 public:
  Chaos(World* world, uint64_t seed) : world_(world), random_(seed) {}
  ~Chaos() { Stop(); }

  void Start() {
    thread_ = std::thread([this] { Run(); });
  }
  // Stops injecting and ends every fault in force (SIGCONT, fault files
  // removed).
  void Stop() {
    {
      MutexLock lock(&mu_);
      stop_ = true;
    }
    if (thread_.joinable()) thread_.join();
  }
  std::map<std::string, int64_t> events() const {
    MutexLock lock(&mu_);
    return events_;
  }
  int lingering_zombies() const {
    MutexLock lock(&mu_);
    return lingering_zombies_;
  }

 private:
  struct Fault {
    int replica;
    std::string kind;
    Steady::time_point until;
    std::optional<ProcInfo> stopped;  // hang: the process SIGSTOPped
  };

  const Options& options() const { return world_->options(); }

  void Count(const std::string& event) {
    MutexLock lock(&mu_);
    ++events_[event];
  }

  int64_t Uniform(int64_t low, int64_t high) {
    return std::uniform_int_distribution<int64_t>(low, high)(random_);
  }
  bool Chance(double p) {
    return std::uniform_real_distribution<double>(0, 1)(random_) < p;
  }

  void Run() {
    std::exponential_distribution<double> gap(1.0 /
                                              options().chaos_interval_ms);
    Steady::time_point next_event =
        Steady::now() + milliseconds(static_cast<int64_t>(gap(random_)));
    Steady::time_point next_watch = Steady::now();
    while (true) {
      Steady::time_point wake = std::min(next_event, next_watch);
      for (const Fault& fault : active_) wake = std::min(wake, fault.until);
      {
        MutexLock lock(&mu_);
        mu_.AwaitWithTimeout(absl::Condition(&stop_),
                             absl::FromChrono(wake - Steady::now()));
        if (stop_) break;
      }
      const Steady::time_point now = Steady::now();
      EndFaults(now, /*all=*/false);
      if (now >= next_watch) {
        WatchZombies();
        next_watch = now + milliseconds(500);
      }
      if (now >= next_event) {
        Inject();
        next_event =
            Steady::now() + milliseconds(static_cast<int64_t>(gap(random_)));
      }
    }
    EndFaults(Steady::now(), /*all=*/true);
  }

  void EndFaults(Steady::time_point now, bool all) {
    for (auto it = active_.begin(); it != active_.end();) {
      if (!all && it->until > now) {
        ++it;
        continue;
      }
      if (it->stopped.has_value() && StillRunning(*it->stopped)) {
        kill(it->stopped->pid, SIGCONT);
      }
      if (it->kind == "slow" || it->kind == "err") {
        const Replica& r = kReplicas[it->replica];
        const std::string path = absl::StrCat(world_->dir().path(), "/fault-",
                                              r.worker, "-", r.index);
        unlink(path.c_str());
      }
      Log(options(),
          absl::StrCat("end ", it->kind, " on ", kReplicas[it->replica].id()));
      it = active_.erase(it);
    }
  }

  void WatchZombies() {
    const std::vector<ProcInfo> procs = ListProcs();
    const Steady::time_point now = Steady::now();
    std::map<std::pair<pid_t, uint64_t>, Steady::time_point> still;
    for (const ProcInfo& p : world_->Descendants(procs)) {
      if (p.state != 'Z') continue;
      const auto key = std::make_pair(p.pid, p.start_time);
      auto found = zombies_.find(key);
      const Steady::time_point first =
          found == zombies_.end() ? now : found->second;
      if (now - first >= std::chrono::seconds(2) &&
          reported_.insert(key).second) {
        MutexLock lock(&mu_);
        ++lingering_zombies_;
        std::fprintf(stderr,
                     "soak: pid %d (%s) has been a zombie for %.0f ms\n", p.pid,
                     p.comm.c_str(), Ms(now - first));
      }
      still[key] = first;
    }
    zombies_ = std::move(still);
  }

  bool Faulty(int replica) const {
    for (const Fault& fault : active_) {
      if (fault.replica == replica) return true;
    }
    return false;
  }

  void Inject() {
    const std::vector<std::string>& kinds = options().kinds;
    const std::string kind =
        kinds[Uniform(0, static_cast<int64_t>(kinds.size()) - 1)];
    if (kind == "sighup") {
      if (Chance(0.5)) {
        call_timeout_long_ = !call_timeout_long_;
        const int ms =
            options().call_timeout_ms * (call_timeout_long_ ? 5 : 4) / 4;
        if (absl::Status s = world_->WriteConfig(ms); !s.ok()) {
          std::fprintf(stderr, "soak: %s\n", s.ToString().c_str());
        }
        Count("sighup (call_timeout changed)");
      } else {
        Count("sighup");
      }
      kill(world_->daemon_pid(), SIGHUP);
      Log(options(), "sighup");
      return;
    }
    if (static_cast<int>(active_.size()) >= options().max_faulty) {
      Count("skipped (enough faults in force)");
      return;
    }
    std::vector<int> candidates;
    for (int r = 0; r < kReplicaCount; ++r) {
      if (!Faulty(r)) candidates.push_back(r);
    }
    if (candidates.empty()) return;
    const int replica =
        candidates[Uniform(0, static_cast<int64_t>(candidates.size()) - 1)];
    const Replica& r = kReplicas[replica];
    const Steady::time_point now = Steady::now();
    if (kind == "slow" || kind == "err") {
      const char* method = Chance(0.7) ? "Learn" : "GetData";
      std::string text;
      Steady::time_point until;
      if (kind == "slow") {
        const int timeout = options().call_timeout_ms;
        const int64_t delay = Chance(0.7)
                                  ? Uniform(50, timeout * 6 / 10)
                                  : Uniform(timeout * 3 / 2, timeout * 2);
        text = absl::StrCat("delay_ms=", delay, " delay_on=", method, "\n");
        until = now + milliseconds(Uniform(500, 3000));
      } else {
        text = absl::StrCat("fail_on=", method, "\n");
        until = now + milliseconds(Uniform(300, 2000));
      }
      if (absl::Status s = WriteAtomically(
              world_->dir(), absl::StrCat("fault-", r.worker, "-", r.index),
              text);
          !s.ok()) {
        std::fprintf(stderr, "soak: %s\n", s.ToString().c_str());
        return;
      }
      active_.push_back(Fault{replica, kind, until, std::nullopt});
      Count(absl::StrCat(kind, " ", method));
      Log(options(), absl::StrCat(kind, " ", r.id(), ": ", text));
      return;
    }
    // kill and hang need the processes.
    absl::StatusOr<pb::AggregatorStatus> status = world_->Status();
    if (!status.ok()) {
      Count("skipped (GetStatus failed)");
      std::fprintf(stderr, "soak: %s\n", status.status().ToString().c_str());
      return;
    }
    const auto procs = world_->Processes(*status, ListProcs());
    const World::ReplicaProcs& p = procs[replica];
    if (!p.learner.has_value() || !StillRunning(*p.learner)) {
      Count("skipped (learner restarting)");
      return;
    }
    if (kind == "kill") {
      const bool guard = Chance(0.2);
      const ProcInfo& target = guard ? *p.guard : *p.learner;
      if (!StillRunning(target)) return;
      kill(target.pid, SIGKILL);
      // Not chosen again until it has had time to come back.
      active_.push_back(Fault{replica, kind, now + milliseconds(1000)});
      Count(guard ? "kill guard" : "kill learner");
      Log(options(), absl::StrCat("SIGKILL ", r.id(), guard ? " guard" : "",
                                  " pid ", target.pid));
    } else {
      kill(p.learner->pid, SIGSTOP);
      active_.push_back(Fault{
          replica, kind, now + milliseconds(Uniform(300, 2500)), *p.learner});
      Count("hang (SIGSTOP)");
      Log(options(), absl::StrCat("SIGSTOP ", r.id(), " pid ", p.learner->pid));
    }
  }

  World* const world_;
  std::mt19937_64 random_;  // chaos thread only
  std::vector<Fault> active_;
  std::map<std::pair<pid_t, uint64_t>, Steady::time_point> zombies_;
  std::set<std::pair<pid_t, uint64_t>> reported_;
  bool call_timeout_long_ = false;
  std::thread thread_;

  mutable Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, int64_t> events_ ABSL_GUARDED_BY(mu_);
  int lingering_zombies_ ABSL_GUARDED_BY(mu_) = 0;
};

// Aborts the soak (and with it the daemon, which dies with its parent) when
// no phase has made progress for a long time: the soak itself cannot hang.
class Watchdog {
 public:
  Watchdog(World* world, std::chrono::seconds quiet) : world_(world) {
    thread_ = std::thread([this, quiet] {
      MutexLock lock(&mu_);
      while (!stop_) {
        mu_.AwaitWithTimeout(absl::Condition(&stop_), absl::Seconds(1));
        const auto [phase, last] = world_->LastProgress();
        if (!stop_ && Steady::now() - last > quiet) {
          std::fprintf(stderr,
                       "soak: HANG: no progress for %lld s in phase '%s'; "
                       "aborting\n",
                       static_cast<long long>(quiet.count()), phase.c_str());
          std::fflush(stderr);
          _exit(3);
        }
      }
    });
  }
  ~Watchdog() {
    {
      MutexLock lock(&mu_);
      stop_ = true;
    }
    thread_.join();
  }

 private:
  World* const world_;
  Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// One coordinator step, counted into `figures`.
class Coordinator {
 public:
  Coordinator(World* world, Figures* figures)
      : world_(world), figures_(figures), ids_(LearnerIds()) {}

  // Returns whether the step succeeded.
  bool Step(int64_t step, bool record) {
    const Options& options = world_->options();
    const milliseconds deadline(options.deadline_ms);
    const Steady::time_point started = Steady::now();
    pb::DataDemand demand;
    grpc::Status status;
    {
      grpc::ClientContext context;
      context.set_deadline(DeadlineIn(deadline));
      status =
          world_->learner().GetData(&context, pb::GetDataRequest(), &demand);
    }
    Timed(Steady::now() - started, deadline);
    bool ok = false;
    if (!status.ok()) {
      Failed("GetData", status, record);
    } else if (!PossibleBatch(demand.batch_size())) {
      BadInfo(absl::StrCat("step ", step, ": GetData batch_size ",
                           demand.batch_size(),
                           " is no sum of the learners' demands"));
    } else {
      pb::LearnRequest request =
          SyntheticBatch(demand.batch_size(), options.sample_bytes,
                         absl::StrCat("s", step, "-"));
      request.set_plan_id(demand.plan_id());
      pb::LearnReply reply;
      const Steady::time_point learn_started = Steady::now();
      {
        grpc::ClientContext context;
        context.set_deadline(DeadlineIn(deadline));
        status = world_->learner().Learn(&context, request, &reply);
      }
      Timed(Steady::now() - learn_started, deadline);
      if (!status.ok()) {
        Failed("Learn", status, record);
      } else if (absl::Status check = CheckLearnReply(request, reply);
                 !check.ok()) {
        BadInfo(absl::StrCat("step ", step, " (", demand.batch_size(),
                             " samples, plan ", demand.plan_id(),
                             "): ", check.message()));
      } else {
        ok = true;
      }
    }
    if (record) {
      latencies_.push_back(Ms(Steady::now() - started));
      ++figures_->steps_run;
      if (ok) ++figures_->steps_ok;
    }
    return ok;
  }

  void Summarize() {
    if (latencies_.empty()) return;
    std::vector<double> sorted = latencies_;
    std::sort(sorted.begin(), sorted.end());
    figures_->p50_step_ms = sorted[sorted.size() / 2];
    figures_->p99_step_ms =
        sorted[std::min(sorted.size() - 1, sorted.size() * 99 / 100)];
    figures_->max_step_ms = sorted.back();
  }

  std::string last_failure() const { return last_failure_; }

 private:
  void Timed(Steady::duration took, milliseconds deadline) {
    const double over = Ms(took) - static_cast<double>(deadline.count());
    if (figures_->max_call_over_deadline_ms == 0 ||
        over > figures_->max_call_over_deadline_ms) {
      figures_->max_call_over_deadline_ms = over;
    }
    if (over > world_->options().slack_ms) {
      ++figures_->hangs;
      std::fprintf(stderr, "soak: a call took %.0f ms (deadline %lld ms)\n",
                   Ms(took), static_cast<long long>(deadline.count()));
    }
  }

  void Failed(const char* rpc, const grpc::Status& status, bool record) {
    const std::string key =
        absl::StrCat(rpc, " ", CodeName(status.error_code()));
    last_failure_ = absl::StrCat(key, ": ", status.error_message());
    if (record) {
      ++figures_->failed_by_status[key];
      figures_->example_message.emplace(key, status.error_message());
    }
    if (!NamesWhatFailed(status, ids_)) {
      if (figures_->unclear_failures++ == 0) {
        figures_->first_unclear = last_failure_;
      }
    }
    Log(world_->options(), last_failure_);
  }

  void BadInfo(const std::string& what) {
    if (figures_->bad_infos++ == 0) figures_->first_bad_info = what;
    std::fprintf(stderr, "soak: BAD INFO: %s\n", what.c_str());
  }

  World* const world_;
  Figures* const figures_;
  const std::vector<std::string> ids_;
  std::vector<double> latencies_;
  std::string last_failure_;
};

// Waits until every learner is ready and every worker running.
absl::Status WaitRecovered(World& world, Steady::time_point deadline) {
  std::string last = "no status yet";
  while (Steady::now() < deadline) {
    world.Progress("recovery: waiting for the learners");
    absl::StatusOr<pb::AggregatorStatus> status = world.Status();
    if (status.ok()) {
      int ready = 0, running = 0;
      for (const auto& l : status->learners()) {
        ready += l.state() == pb::LEARNER_STATE_READY;
      }
      for (const auto& w : status->workers()) {
        running += w.state() == pb::WORKER_STATE_RUNNING;
      }
      if (ready == kReplicaCount && running == kReplicaCount) {
        return absl::OkStatus();
      }
      last = absl::StrCat(ready, " of ", kReplicaCount, " learners ready, ",
                          running, " workers running");
      for (const auto& w : status->workers()) {
        if (w.state() != pb::WORKER_STATE_RUNNING) {
          absl::StrAppend(&last, "; ", w.name(), "-", w.index(), " ",
                          pb::WorkerState_Name(w.state()), " ", w.last_error());
        }
      }
    } else {
      last = std::string(status.status().message());
    }
    std::this_thread::sleep_for(milliseconds(50));  // polling interval
  }
  return absl::DeadlineExceededError(
      absl::StrCat("the learners did not all come back: ", last));
}

// Waits (polling /proc) until `measure` is at most `limit`; returns the last
// value read.
template <typename F>
int WaitAtMost(World& world, const char* what, F measure, int limit,
               Steady::time_point deadline) {
  int value = measure();
  while (value > limit && Steady::now() < deadline) {
    world.Progress(what);
    std::this_thread::sleep_for(milliseconds(100));  // polling interval
    value = measure();
  }
  return value;
}

// The flags into `options`, checked, and the binaries found; an exit code
// instead when the soak is not to run (CLI11's for --help or a bad flag, 2
// after saying why).
std::optional<int> ParseFlags(int argc, char** argv, Options& options) {
  CLI::App app{
      "soak: a chaos soak of aggregatord with 4 supervised example learners "
      "that crash, hang, slow down and err at random, plus SIGHUPs"};
  app.add_option("--steps", options.steps, "GetData+Learn steps under chaos")
      ->check(CLI::PositiveNumber);
  app.add_option("--max-seconds", options.max_seconds,
                 "stop starting steps after this long (the checks still run)")
      ->check(CLI::PositiveNumber);
  app.add_option("--seed", options.seed, "seed of the chaos' choices");
  app.add_option("--chaos-interval-ms", options.chaos_interval_ms,
                 "mean time between chaos events")
      ->check(CLI::PositiveNumber);
  app.add_option("--max-faulty", options.max_faulty,
                 "learners faulty at once, at most")
      ->check(CLI::Range(1, kReplicaCount));
  app.add_option("--sample-bytes", options.sample_bytes, "bytes per sample")
      ->check(CLI::PositiveNumber);
  app.add_option("--call-timeout-ms", options.call_timeout_ms,
                 "the daemon's call_timeout (SIGHUPs alternate it with 1.25x)")
      ->check(CLI::Range(100, 60000));
  app.add_option("--deadline-ms", options.deadline_ms,
                 "deadline of each coordinator call")
      ->check(CLI::PositiveNumber);
  app.add_option("--slack-ms", options.slack_ms,
                 "a call later than its deadline by more than this is a hang")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--warmup-steps", options.warmup_steps,
                 "chaos steps before the RSS baseline (default steps/10, from "
                 "20 to 500)");
  app.add_option("--recovery-steps", options.recovery_steps,
                 "steps after the chaos that must all succeed")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--pause-ms", options.pause_ms,
                 "the coordinator's pause between steps (its own work)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-rss-growth", options.max_rss_growth,
                 "allowed RSS growth after warm-up, in percent");
  app.add_option("--fd-slack", options.fd_slack,
                 "fds allowed above the baseline at the end");
  app.add_option("--thread-slack", options.thread_slack,
                 "threads allowed above the baseline at the end");
  app.add_option("--daemon", options.daemon,
                 "aggregatord binary (default: from the runfiles)");
  app.add_option("--learner", options.learner,
                 "example_learner binary (default: from the runfiles)");
  app.add_option("--chaos", options.kinds,
                 "the chaos events to draw from (default: all)")
      ->delimiter(',')
      ->check(CLI::IsMember({"kill", "hang", "slow", "err", "sighup"}));
  app.add_option("--daemon-env", options.daemon_env,
                 "KEY=VALUE added to the daemon's environment (repeatable)");
  app.add_flag("-v,--verbose", options.verbose,
               "log every chaos event and failure to stderr");
  CLI11_PARSE(app, argc, argv);
  if (options.deadline_ms <= options.call_timeout_ms * 2) {
    std::fprintf(stderr,
                 "soak: --deadline-ms must exceed twice --call-timeout-ms "
                 "(the daemon must answer first)\n");
    return 2;
  }
  if (options.warmup_steps < 0) {
    options.warmup_steps = std::clamp<int64_t>(options.steps / 10, 20, 500);
  }
  options.warmup_steps = std::min(options.warmup_steps, options.steps);
  options.daemon = UserPath(options.daemon);
  options.learner = UserPath(options.learner);
  if (absl::Status s = ResolveDaemonAndLearner(ToolPaths(argv[0], "soak"),
                                               options.daemon, options.learner);
      !s.ok()) {
    std::fprintf(stderr, "soak: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  return std::nullopt;
}

// aggregatord on the soak's configuration (with --daemon-env), connected,
// every learner ready and a task started; nullptr, after saying why, when not.
std::unique_ptr<DaemonProcess> StartDaemon(World& world) {
  const Options& options = world.options();
  ChildEnv env;
  for (const std::string& entry : options.daemon_env) {
    const size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) {
      std::fprintf(stderr, "soak: --daemon-env '%s': expected KEY=VALUE\n",
                   entry.c_str());
      return nullptr;
    }
    env.vars.emplace_back(entry.substr(0, eq), entry.substr(eq + 1));
  }
  auto daemon = DaemonProcess::Spawn(options.daemon, world.config_path(), env);
  if (!daemon.ok()) {
    std::fprintf(stderr, "soak: %s\n", daemon.status().ToString().c_str());
    return nullptr;
  }
  const Steady::time_point startup = Steady::now() + std::chrono::seconds(30);
  auto listening = (*daemon)->WaitListening(startup);
  auto admin = listening.ok() ? (*daemon)->WaitAdmin(startup)
                              : absl::StatusOr<std::string>(listening.status());
  if (!admin.ok()) {
    std::fprintf(stderr, "soak: %s\n%s", admin.status().ToString().c_str(),
                 (*daemon)->Tail(20).c_str());
    return nullptr;
  }
  world.Connect((*daemon)->pid(), listening->address, *admin);
  if (absl::Status s = WaitRecovered(world, startup); !s.ok()) {
    std::fprintf(stderr, "soak: at start-up: %s\n%s", s.ToString().c_str(),
                 (*daemon)->Tail(20).c_str());
    return nullptr;
  }
  {
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(milliseconds(options.deadline_ms)));
    pb::StartTaskRequest request;
    (*request.mutable_task_info()->mutable_fields())["task_id"]
        .set_string_value("soak");
    (*request.mutable_task_info()->mutable_fields())["buffer_id"]
        .set_string_value("soak-buffer");
    pb::StartTaskReply reply;
    const grpc::Status s = world.learner().StartTask(&context, request, &reply);
    if (!s.ok()) {
      std::fprintf(stderr, "soak: StartTask: %s\n", s.error_message().c_str());
      return nullptr;
    }
  }
  return *std::move(daemon);
}

// The clean warm-up: steps before any chaos, so every connection is made;
// then the fd and thread baselines. The daemon's thread names at the baseline,
// or nothing, after saying why, when a step fails.
std::optional<std::map<std::string, int>> CleanWarmUp(World& world,
                                                      Coordinator& coordinator,
                                                      Figures& figures) {
  for (int i = 0; i < 10; ++i) {
    world.Progress("clean warm-up");
    if (!coordinator.Step(-1 - i, /*record=*/false)) {
      std::fprintf(stderr, "soak: a step failed before any chaos: %s\n",
                   coordinator.last_failure().c_str());
      return std::nullopt;
    }
  }
  figures.fds_baseline = CountFds(world.daemon_pid());
  const std::map<std::string, int> baseline_threads =
      ThreadNames(world.daemon_pid());
  figures.threads_baseline =
      CountThreads(baseline_threads, /*grpc_pools=*/false);
  return baseline_threads;
}

// The chaos phase: --steps steps (fewer past --max-seconds from `started`)
// while Chaos strikes, with the RSS sampled along the way.
void RunChaos(World& world, Coordinator& coordinator,
              Steady::time_point started, Figures& figures) {
  const Options& options = world.options();
  const Steady::time_point stop_at =
      started + milliseconds(static_cast<int64_t>(options.max_seconds * 1000));
  Chaos chaos(&world, options.seed);
  chaos.Start();
  for (int64_t step = 0; step < options.steps; ++step) {
    if (Steady::now() >= stop_at) {
      figures.time_bound_hit = true;
      break;
    }
    world.Progress(absl::StrCat("chaos step ", step));
    coordinator.Step(step, /*record=*/true);
    // The coordinator's own work between steps (sampling, training): it
    // gives the chaos time to act, measured in steps rather than in calls.
    std::this_thread::sleep_for(milliseconds(options.pause_ms));
    if (step + 1 == options.warmup_steps) {
      figures.rss_baseline_kib = RssKiB(world.daemon_pid());
    }
    if ((step + 1) % std::max<int64_t>(1, options.steps / 10) == 0) {
      figures.rss_samples.emplace_back(step + 1, RssKiB(world.daemon_pid()));
    }
    if (step % 100 == 99) {
      std::fprintf(stderr, "soak: %lld steps, %lld ok\n",
                   static_cast<long long>(step + 1),
                   static_cast<long long>(figures.steps_ok));
    }
  }
  if (figures.rss_baseline_kib == 0) {
    figures.rss_baseline_kib = RssKiB(world.daemon_pid());  // short run
  }
  world.Progress("ending the chaos");
  chaos.Stop();
  figures.chaos_events = chaos.events();
  figures.lingering_zombies = chaos.lingering_zombies();
}

// Recovery: every learner back, then steps that must all succeed.
void Recover(World& world, Coordinator& coordinator, Figures& figures) {
  const Options& options = world.options();
  if (absl::Status s =
          WaitRecovered(world, Steady::now() + std::chrono::seconds(30));
      !s.ok()) {
    figures.recovery_error = std::string(s.message());
  } else {
    figures.recovered = true;
    figures.recovery_steps = options.recovery_steps;
    for (int i = 0; i < options.recovery_steps; ++i) {
      world.Progress("recovery steps");
      if (coordinator.Step(options.steps + i, /*record=*/false)) {
        ++figures.recovery_ok;
      } else {
        std::fprintf(stderr, "soak: recovery step failed: %s\n",
                     coordinator.last_failure().c_str());
      }
    }
  }
}

// What the daemon holds once it has settled after the chaos: fds, threads,
// zombies, RSS; and a last look at its workers' processes.
void MeasureSettled(World& world,
                    const std::map<std::string, int>& baseline_threads,
                    Figures& figures) {
  const Options& options = world.options();
  const pid_t pid = world.daemon_pid();
  const Steady::time_point settle = Steady::now() + std::chrono::seconds(10);
  figures.fds_end = WaitAtMost(
      world, "fds settling", [pid] { return CountFds(pid); },
      figures.fds_baseline + options.fd_slack, settle);
  figures.threads_end = WaitAtMost(
      world, "threads settling",
      [pid] { return CountThreads(ThreadNames(pid), /*grpc_pools=*/false); },
      figures.threads_baseline + options.thread_slack, settle);
  {
    // gRPC's pools: each at most twice the cores (the executors' own cap), or
    // what it had at the baseline if more.
    const std::map<std::string, int> end_threads = ThreadNames(pid);
    figures.pool_threads_end = CountThreads(end_threads, /*grpc_pools=*/true);
    std::map<std::string, int> names = baseline_threads;
    for (const auto& [name, n] : end_threads) names.emplace(name, 0);
    const int cap = 2 * static_cast<int>(std::thread::hardware_concurrency());
    for (const auto& [name, n] : names) {
      if (IsGrpcPoolThread(name))
        figures.pool_threads_limit += std::max(n, cap);
    }
  }
  figures.zombies_end = WaitAtMost(
      world, "zombies settling",
      [&world] {
        int zombies = 0;
        for (const ProcInfo& p : world.Descendants(ListProcs())) {
          zombies += p.state == 'Z';
        }
        return zombies;
      },
      0, Steady::now() + std::chrono::seconds(3));
  figures.rss_end_kib = RssKiB(pid);
  figures.thread_changes = ThreadChanges(baseline_threads, ThreadNames(pid));
  if (auto peak = ProcStatusKiB(pid, "VmHWM"); peak.ok()) {
    figures.rss_peak_kib = *peak;
  }
  // The last look at the workers' processes, for the leftover check.
  if (auto status = world.Status(); status.ok()) {
    world.Processes(*status, ListProcs());
  }
}

// SIGTERM to the daemon and how it exited; then every process the soak saw
// that outlived it, counted and killed.
void StopDaemon(World& world, std::unique_ptr<DaemonProcess> daemon,
                Figures& figures) {
  const pid_t pid = world.daemon_pid();
  world.Progress("daemon stopping");
  auto stopped = daemon->Terminate(Steady::now() + std::chrono::seconds(30));
  if (stopped.ok()) {
    figures.daemon_exit_ok = true;
    figures.daemon_exit =
        absl::StrCat("exit code 0, ", static_cast<int64_t>(Ms(*stopped)),
                     " ms after SIGTERM");
  } else {
    figures.daemon_exit = std::string(stopped.status().message());
  }
  std::vector<std::string> leftovers;
  for (const ProcInfo& p : world.Seen()) {
    if (StillRunning(p)) {
      leftovers.push_back(absl::StrCat(p.pid, " (", p.comm, ")"));
      kill(p.pid, SIGKILL);  // ours: started by this soak's daemon
    }
  }
  // Descendants of the daemon orphaned to this subreaper.
  for (const ProcInfo& p : ListProcs()) {
    if (p.ppid != getpid() || p.pid == pid) continue;
    if (p.state != 'Z') {
      leftovers.push_back(absl::StrCat(p.pid, " (", p.comm, ", orphaned)"));
      kill(p.pid, SIGKILL);
    }
    waitpid(p.pid, nullptr, 0);
  }
  figures.leftovers = static_cast<int>(leftovers.size());
  figures.leftover_list = absl::StrJoin(leftovers, ", ");
}

// The verdicts, as a table on stdout; the exit code.
int Report(const Figures& figures, const Options& options) {
  Limits limits;
  limits.max_rss_growth_percent = options.max_rss_growth;
  limits.fd_slack = options.fd_slack;
  limits.thread_slack = options.thread_slack;
  const std::vector<Verdict> verdicts = Evaluate(figures, limits);
  std::fputs(FormatTable(figures, verdicts).c_str(), stdout);
  std::fflush(stdout);
  const bool passed = std::all_of(verdicts.begin(), verdicts.end(),
                                  [](const Verdict& v) { return v.passed; });
  return passed ? 0 : 1;
}

int Main(int argc, char** argv) {
  Options options;
  if (std::optional<int> exit = ParseFlags(argc, argv, options)) return *exit;
  // Whatever the daemon's tree leaves behind when it ends becomes ours.
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    std::perror("soak: PR_SET_CHILD_SUBREAPER");
    return 2;
  }
  auto dir = TempDir::Create();
  auto ports = FreePorts(kReplicaCount);
  if (!dir.ok() || !ports.ok()) {
    std::fprintf(
        stderr, "soak: %s\n",
        (!dir.ok() ? dir.status() : ports.status()).ToString().c_str());
    return 2;
  }
  World world(options, std::move(*dir), *ports);
  if (absl::Status s = world.WriteConfig(options.call_timeout_ms); !s.ok()) {
    std::fprintf(stderr, "soak: %s\n", s.ToString().c_str());
    return 2;
  }
  std::printf(
      "soak: seed %llu, %lld steps (at most %.0f s), chaos every %d ms "
      "on average, learners on 127.0.0.1:%d-%d\n",
      static_cast<unsigned long long>(options.seed),
      static_cast<long long>(options.steps), options.max_seconds,
      options.chaos_interval_ms, *ports, *ports + 3);
  std::fflush(stdout);

  Figures figures;
  figures.steps_requested = options.steps;
  const Steady::time_point started = Steady::now();
  Watchdog watchdog(&world,
                    std::chrono::seconds(options.deadline_ms * 2 / 1000 + 60));
  std::unique_ptr<DaemonProcess> daemon = StartDaemon(world);
  if (daemon == nullptr) return 2;

  Coordinator coordinator(&world, &figures);
  const std::optional<std::map<std::string, int>> baseline_threads =
      CleanWarmUp(world, coordinator, figures);
  if (!baseline_threads.has_value()) return 2;
  RunChaos(world, coordinator, started, figures);
  coordinator.Summarize();
  Recover(world, coordinator, figures);
  MeasureSettled(world, *baseline_threads, figures);
  StopDaemon(world, std::move(daemon), figures);
  figures.wall_seconds =
      std::chrono::duration<double>(Steady::now() - started).count();
  return Report(figures, options);
}

}  // namespace
}  // namespace aggregator::soak

int main(int argc, char** argv) { return aggregator::soak::Main(argc, argv); }
