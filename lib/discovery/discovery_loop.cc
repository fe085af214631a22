#include "lib/discovery/discovery_loop.h"

#include <spdlog/spdlog.h>

#include <exception>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/base/backoff.h"
#include "lib/discovery/dns_source.h"
#include "lib/discovery/orchestrator_source.h"

namespace aggregator {
namespace {

using std::chrono::milliseconds;

// A failure report that was not accepted is sent again after this schedule.
constexpr milliseconds kMaxReportDelay{5 * 60 * 1000};

milliseconds RefreshOf(const LearnerSourceConfig& config) {
  return std::visit([](const auto& c) { return c.refresh; }, config);
}

milliseconds TimeoutOf(const LearnerSourceConfig& config) {
  return std::visit([](const auto& c) { return c.timeout; }, config);
}

std::optional<milliseconds> ReportAfterOf(const LearnerSourceConfig& config) {
  if (const auto* o = std::get_if<OrchestratorSourceConfig>(&config)) {
    return o->report_failed_after;
  }
  return std::nullopt;
}

// `call`'s result, or an exception it threw as INTERNAL: a source's thread
// never dies of one.
template <typename Call>
auto Guarded(Call call) -> decltype(call()) {
  try {
    return call();
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("unexpected exception: ", e.what()));
  } catch (...) {
    return absl::InternalError("unexpected exception");
  }
}

std::string Addresses(const std::vector<HostPort>& learners) {
  return absl::StrJoin(learners, ", ", [](std::string* out, const HostPort& l) {
    out->append(l.ToString());
  });
}

}  // namespace

std::unique_ptr<LearnerSource> MakeLearnerSource(
    const LearnerSourceConfig& config) {
  if (const auto* dns = std::get_if<DnsSourceConfig>(&config)) {
    return std::make_unique<DnsSource>(*dns);
  }
  return std::make_unique<OrchestratorSource>(
      std::get<OrchestratorSourceConfig>(config));
}

std::vector<HostPort> StableMerge(const std::vector<HostPort>& previous,
                                  const std::vector<HostPort>& next) {
  std::set<std::string> in_next;
  for (const HostPort& address : next) in_next.insert(address.ToString());
  std::vector<HostPort> merged;
  std::set<std::string> taken;
  for (const HostPort& address : previous) {
    const std::string id = address.ToString();
    if (in_next.count(id) != 0 && taken.insert(id).second) {
      merged.push_back(address);
    }
  }
  for (const HostPort& address : next) {
    if (taken.insert(address.ToString()).second) merged.push_back(address);
  }
  return merged;
}

struct DiscoveryLoop::Source {
  Source(LearnerSourceConfig config_in, uint64_t instance_in)
      : key(LearnerSourceKey(config_in)),
        name(absl::StrCat("learner source ", key)),
        instance(instance_in),
        config(std::move(config_in)) {}

  // A learner of the source the pool has had failed since `since`.
  struct Episode {
    Clock::TimePoint since;
    bool reported = false;
  };

  const std::string key;
  // For logs, whatever the settings: "learner source dns learners.test:22300".
  const std::string name;
  const uint64_t instance;
  // The source is stopping: cuts its requests (RequestLimits::stop) and ends
  // its thread. Set under mu, so a wait on `wake` cannot miss it.
  std::atomic<bool> cut_requests{false};
  std::thread thread;

  Mutex mu;
  CondVar wake;
  LearnerSourceConfig config ABSL_GUARDED_BY(mu);
  uint64_t version ABSL_GUARDED_BY(mu) = 0;  // of `config`
  // Bumped whenever a wait should look again (the clock moved, a new
  // configuration, stop).
  uint64_t ticks ABSL_GUARDED_BY(mu) = 0;
  std::optional<Clock::TimePoint> last_start ABSL_GUARDED_BY(mu);
  std::vector<HostPort> learners ABSL_GUARDED_BY(mu);
  std::optional<Clock::TimePoint> last_refresh ABSL_GUARDED_BY(mu);
  std::string last_error ABSL_GUARDED_BY(mu);
  bool failing ABSL_GUARDED_BY(mu) = false;  // its last refresh failed
  int64_t refreshes ABSL_GUARDED_BY(mu) = 0;
  int64_t errors ABSL_GUARDED_BY(mu) = 0;
  std::map<std::string, Episode> episodes ABSL_GUARDED_BY(mu);
  Clock::TimePoint report_retry_at ABSL_GUARDED_BY(mu){};
  int report_failures ABSL_GUARDED_BY(mu) = 0;  // in a row
  int64_t reported ABSL_GUARDED_BY(mu) = 0;
  int64_t report_errors ABSL_GUARDED_BY(mu) = 0;
};

DiscoveryLoop::DiscoveryLoop(DiscoveryHooks hooks)
    : hooks_([&] {
        if (!hooks.make_source) hooks.make_source = MakeLearnerSource;
        return std::move(hooks);
      }()),
      clock_(ClockOrSteady(hooks_.clock)) {
  waker_token_ = clock_.AddWaker([this] { Wake(); });
}

DiscoveryLoop::~DiscoveryLoop() {
  Stop();
  clock_.RemoveWaker(waker_token_);
}

void DiscoveryLoop::Wake() {
  MutexLock lock(&mu_);
  for (const auto& source : sources_) {
    MutexLock source_lock(&source->mu);
    ++source->ticks;
    source->wake.SignalAll();
  }
}

void DiscoveryLoop::Apply(const std::vector<LearnerSourceConfig>& configs) {
  std::vector<std::unique_ptr<Source>> removed;
  {
    MutexLock lock(&mu_);
    if (stopped_) return;
    std::vector<std::unique_ptr<Source>> next;
    for (const LearnerSourceConfig& config : configs) {
      const std::string key = LearnerSourceKey(config);
      auto same = std::find_if(sources_.begin(), sources_.end(),
                               [&](const std::unique_ptr<Source>& s) {
                                 return s != nullptr && s->key == key;
                               });
      if (same != sources_.end()) {
        Source& source = **same;
        MutexLock source_lock(&source.mu);
        if (source.config != config) {
          spdlog::info("{}: settings changed; kept with its {} learner(s)",
                       source.name, source.learners.size());
          source.config = config;
          ++source.version;
          ++source.ticks;
          source.wake.SignalAll();
        }
        next.push_back(std::move(*same));
        continue;
      }
      auto source = std::make_unique<Source>(config, ++instances_);
      spdlog::info("{}: started (refresh every {}ms)", source->name,
                   RefreshOf(config).count());
      Source* raw = source.get();
      source->thread = std::thread([this, raw] { Run(raw); });
      next.push_back(std::move(source));
    }
    for (auto& source : sources_) {
      if (source == nullptr) continue;
      MutexLock source_lock(&source->mu);
      source->cut_requests = true;
      source->wake.SignalAll();
      removed.push_back(std::move(source));
    }
    sources_ = std::move(next);
  }
  // Outside mu_: a stopping thread may be in on_change, which reads Members().
  bool had_learners = false;
  for (auto& source : removed) {
    source->thread.join();
    MutexLock source_lock(&source->mu);
    spdlog::info("{}: removed; its {} learner(s) leave the pool", source->name,
                 source->learners.size());
    had_learners = had_learners || !source->learners.empty();
  }
  if (had_learners && hooks_.on_change) hooks_.on_change();
}

void DiscoveryLoop::Stop() {
  std::vector<std::unique_ptr<Source>> all;
  {
    MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
    all.swap(sources_);
    for (auto& source : all) {
      MutexLock source_lock(&source->mu);
      source->cut_requests = true;
      source->wake.SignalAll();
    }
  }
  for (auto& source : all) source->thread.join();
}

std::vector<std::vector<HostPort>> DiscoveryLoop::Members() const {
  MutexLock lock(&mu_);
  std::vector<std::vector<HostPort>> members;
  for (const auto& source : sources_) {
    MutexLock source_lock(&source->mu);
    members.push_back(source->learners);
  }
  return members;
}

std::vector<SourceSnapshot> DiscoveryLoop::Status() const {
  const Clock::TimePoint now = clock_.Now();  // never under the locks
  MutexLock lock(&mu_);
  std::vector<SourceSnapshot> status;
  for (const auto& source : sources_) {
    MutexLock source_lock(&source->mu);
    SourceSnapshot& out = status.emplace_back();
    out.kind = LearnerSourceKind(source->config);
    out.key = source->key;
    out.target = LearnerSourceTarget(source->config);
    out.instance = source->instance;
    out.learners = source->learners;
    if (source->last_refresh) {
      out.since_last_refresh = now - *source->last_refresh;
    }
    out.last_error = source->last_error;
    out.refreshes = source->refreshes;
    out.errors = source->errors;
    out.reported = source->reported;
    out.report_errors = source->report_errors;
  }
  return status;
}

bool DiscoveryLoop::WaitForRefresh(Source* source) {
  while (true) {
    uint64_t ticks = 0;
    std::optional<Clock::TimePoint> due;  // nullopt: at once
    {
      MutexLock lock(&source->mu);
      if (source->cut_requests) return false;
      ticks = source->ticks;
      if (source->last_start) {
        due = *source->last_start + RefreshOf(source->config);
      }
    }
    // The clock is read without the lock: a fake clock's waker takes it.
    if (!due || clock_.Now() >= *due) return true;
    const std::optional<Clock::Duration> delay = clock_.RealDelayUntil(*due);
    MutexLock lock(&source->mu);
    if (source->cut_requests) return false;
    if (source->ticks != ticks) continue;  // the clock moved: look again
    if (delay) {
      source->wake.WaitWithTimeout(&source->mu, absl::FromChrono(*delay));
    } else {
      source->wake.Wait(&source->mu);
    }
  }
}

void DiscoveryLoop::Run(Source* source) {
  std::unique_ptr<LearnerSource> from;
  uint64_t built = 0;
  while (WaitForRefresh(source)) {
    // Whatever throws on the way (building the source, a hook) fails this
    // refresh like a failed request: counted, logged once per episode, tried
    // again at the next. The thread goes on.
    const absl::Status step = Guarded([&]() -> absl::Status {
      const Clock::TimePoint start = clock_.Now();
      LearnerSourceConfig config;
      uint64_t version = 0;
      {
        MutexLock lock(&source->mu);
        source->last_start = start;
        config = source->config;
        version = source->version;
      }
      if (from == nullptr || version != built) {
        from = hooks_.make_source(config);
        built = version;
      }
      ReportFailed(source, *from, config);
      Refresh(source, *from, config);
      return absl::OkStatus();
    });
    if (!step.ok()) Record(source, step);
  }
}

void DiscoveryLoop::Refresh(Source* source, LearnerSource& from,
                            const LearnerSourceConfig& config) {
  const RequestLimits limits{
      std::chrono::steady_clock::now() + TimeoutOf(config),
      &source->cut_requests};
  const absl::StatusOr<std::vector<HostPort>> answer =
      Guarded([&]() -> absl::StatusOr<std::vector<HostPort>> {
        return from.Fetch(limits);
      });
  if (!Record(source, answer) || !hooks_.on_change) return;
  // The owner's trouble, not the source's: logged, and the refresh stands.
  const absl::Status notified = Guarded([&]() -> absl::Status {
    hooks_.on_change();
    return absl::OkStatus();
  });
  if (!notified.ok()) {
    spdlog::error("{}: on_change: {}", source->name,
                  std::string(notified.message()));
  }
}

bool DiscoveryLoop::Record(
    Source* source, const absl::StatusOr<std::vector<HostPort>>& answer) {
  const Clock::TimePoint now = clock_.Now();
  std::vector<HostPort> joined;
  std::vector<HostPort> left;
  size_t count = 0;
  bool first_error = false;
  bool recovered = false;
  {
    MutexLock lock(&source->mu);
    if (source->cut_requests) return false;  // cut short, or no longer wanted
    ++source->refreshes;
    count = source->learners.size();
    if (!answer.ok()) {
      ++source->errors;
      first_error = !source->failing;
      source->failing = true;
      source->last_error = std::string(answer.status().message());
    } else {
      recovered = source->failing;
      source->failing = false;
      source->last_error.clear();
      source->last_refresh = now;
      std::vector<HostPort> next = StableMerge(source->learners, *answer);
      for (const HostPort& address : next) {
        if (std::find(source->learners.begin(), source->learners.end(),
                      address) == source->learners.end()) {
          joined.push_back(address);
        }
      }
      for (const HostPort& address : source->learners) {
        if (std::find(next.begin(), next.end(), address) == next.end()) {
          left.push_back(address);
        }
      }
      source->learners = std::move(next);
      count = source->learners.size();
    }
  }
  if (first_error) {
    spdlog::warn(
        "{}: refresh failed: {}; keeping its {} learner(s) until a refresh "
        "succeeds",
        source->name, std::string(answer.status().message()), count);
  } else if (!answer.ok()) {
    spdlog::debug("{}: still failing: {}", source->name,
                  std::string(answer.status().message()));
  } else if (recovered) {
    spdlog::info("{}: refreshes succeed again ({} learner(s))", source->name,
                 count);
  }
  if (joined.empty() && left.empty()) return false;
  spdlog::info("{}: {} learner(s) now{}{}{}{}", source->name, count,
               joined.empty() ? "" : "; joined: ", Addresses(joined),
               left.empty() ? "" : "; left: ", Addresses(left));
  return true;
}

void DiscoveryLoop::ReportFailed(Source* source, LearnerSource& to,
                                 const LearnerSourceConfig& config) {
  const std::optional<milliseconds> after = ReportAfterOf(config);
  if (!after || !hooks_.failed_learners) return;
  const std::set<std::string> failed = hooks_.failed_learners();
  const Clock::TimePoint now = clock_.Now();
  std::vector<HostPort> due;
  {
    MutexLock lock(&source->mu);
    // A learner of the source that is failed starts (or goes on with) an
    // episode; one that is not, or is gone, ends its own.
    std::map<std::string, Source::Episode> episodes;
    for (const HostPort& learner : source->learners) {
      const std::string id = learner.ToString();
      if (failed.count(id) == 0) continue;
      auto running = source->episodes.find(id);
      episodes[id] = running != source->episodes.end()
                         ? running->second
                         : Source::Episode{now, false};
      if (!episodes[id].reported && now - episodes[id].since >= *after) {
        due.push_back(learner);
      }
    }
    source->episodes = std::move(episodes);
    if (due.empty() || now < source->report_retry_at) return;
  }
  const RequestLimits limits{
      std::chrono::steady_clock::now() + TimeoutOf(config),
      &source->cut_requests};
  const absl::Status reported =
      Guarded([&]() -> absl::Status { return to.ReportFailed(due, limits); });
  const Clock::TimePoint done = clock_.Now();
  bool first_error = false;
  {
    MutexLock lock(&source->mu);
    if (source->cut_requests) return;
    if (reported.ok()) {
      for (const HostPort& learner : due) {
        auto episode = source->episodes.find(learner.ToString());
        if (episode != source->episodes.end()) episode->second.reported = true;
      }
      source->reported += static_cast<int64_t>(due.size());
      source->report_failures = 0;
      source->report_retry_at = Clock::TimePoint{};
    } else {
      first_error = source->report_failures == 0;
      ++source->report_errors;
      source->report_retry_at =
          done + BackoffDelay(BackoffOptions{RefreshOf(config), 2.0, 0.0,
                                             std::max(kMaxReportDelay,
                                                      RefreshOf(config))},
                              source->report_failures);
      ++source->report_failures;
    }
  }
  if (reported.ok()) {
    spdlog::warn("{}: reported {} learner(s) failed for {}ms or more: {}",
                 source->name, due.size(), after->count(), Addresses(due));
  } else if (first_error) {
    spdlog::warn(
        "{}: cannot report failed learner(s) {}: {}; trying again "
        "later",
        source->name, Addresses(due), std::string(reported.message()));
  }
}

}  // namespace aggregator
