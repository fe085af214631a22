#include "tools/soak/soak_checks.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "tests/testing/example_learner_service.h"

namespace aggregator::soak {
namespace {

namespace pb = aggregator::v1;
using google::protobuf::ListValue;
using google::protobuf::Struct;
using google::protobuf::Value;

const Value* Field(const Struct& s, const char* key) {
  auto it = s.fields().find(key);
  return it == s.fields().end() ? nullptr : &it->second;
}

// The list at info.priority_info.<key>, or an error naming what is missing.
absl::StatusOr<const ListValue*> PerSampleList(const Struct& info,
                                               const char* key) {
  const Value* priority_info = Field(info, "priority_info");
  if (priority_info == nullptr || !priority_info->has_struct_value()) {
    return absl::DataLossError("the info has no priority_info map");
  }
  const Value* list = Field(priority_info->struct_value(), key);
  if (list == nullptr || !list->has_list_value()) {
    return absl::DataLossError(
        absl::StrCat("the info has no list priority_info.", key));
  }
  return &list->list_value();
}

std::string Describe(const Value& value) {
  switch (value.kind_case()) {
    case Value::kNullValue:
      return "null";
    case Value::kNumberValue:
      return absl::StrCat(value.number_value());
    case Value::kStringValue:
      return absl::StrCat("'", value.string_value(), "'");
    case Value::kBoolValue:
      return value.bool_value() ? "true" : "false";
    case Value::kStructValue:
      return "a map";
    case Value::kListValue:
      return "a list";
    default:
      return "nothing";
  }
}

std::string ReadSmallFile(const std::string& path, bool* ok) {
  std::ifstream in(path);
  *ok = in.good();
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// "Name:\tvalue ..." of /proc/<pid>/status: the first number after it.
int64_t StatusNumber(pid_t pid, const std::string& name) {
  bool ok = false;
  const std::string text =
      ReadSmallFile(absl::StrCat("/proc/", pid, "/status"), &ok);
  if (!ok) return -1;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, name) || !absl::ConsumePrefix(&line, ":")) {
      continue;
    }
    std::vector<absl::string_view> words =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    int64_t value = 0;
    if (!words.empty() && absl::SimpleAtoi(words[0], &value)) return value;
    return -1;
  }
  return -1;
}

std::string Percent(double value) { return absl::StrFormat("%.1f %%", value); }

}  // namespace

absl::Status CheckLearnReply(const pb::LearnRequest& request,
                             const pb::LearnReply& reply) {
  const int n = request.samples_size();
  const Struct& info = reply.info();
  auto priorities = PerSampleList(info, "priority");
  if (!priorities.ok()) return priorities.status();
  auto ids = PerSampleList(info, "replay_unique_id");
  if (!ids.ok()) return ids.status();
  if ((*priorities)->values_size() != n) {
    return absl::DataLossError(absl::StrCat("priority_info.priority has ",
                                            (*priorities)->values_size(),
                                            " entries for ", n, " samples"));
  }
  if ((*ids)->values_size() != n) {
    return absl::DataLossError(
        absl::StrCat("priority_info.replay_unique_id has ",
                     (*ids)->values_size(), " entries for ", n, " samples"));
  }
  for (int i = 0; i < n; ++i) {
    const pb::Sample& sample = request.samples(i);
    const Value* sent = Field(sample.meta(), "replay_unique_id");
    const Value& got = (*ids)->values(i);
    if (sent == nullptr || !got.has_string_value() ||
        got.string_value() != sent->string_value()) {
      return absl::DataLossError(absl::StrCat(
          "priority_info.replay_unique_id[", i, "] is ", Describe(got),
          ", sample ", i, " has ", sent == nullptr ? "none" : Describe(*sent)));
    }
    const Value& priority = (*priorities)->values(i);
    const double expected = SamplePriority(sample.data());
    if (!priority.has_number_value() || priority.number_value() != expected) {
      return absl::DataLossError(
          absl::StrCat("priority_info.priority[", i, "] is ",
                       Describe(priority), ", sample ", i, "'s is ", expected));
    }
  }
  const Value* received = Field(info, "received");
  double total = 0;
  if (received != nullptr && received->has_number_value()) {
    total = received->number_value();
  } else if (received != nullptr && received->has_list_value()) {
    for (const Value& count : received->list_value().values()) {
      if (!count.has_number_value()) {
        return absl::DataLossError(
            absl::StrCat("info.received holds ", Describe(count)));
      }
      total += count.number_value();
    }
  } else {
    return absl::DataLossError("the info has no 'received' counts");
  }
  if (total != n) {
    return absl::DataLossError(absl::StrCat("the learners received ", total,
                                            " samples in all, not ", n));
  }
  return absl::OkStatus();
}

bool NamesWhatFailed(const grpc::Status& status,
                     const std::vector<std::string>& learner_ids) {
  const std::string& message = status.error_message();
  if (status.ok() || message.empty()) return false;
  for (const std::string& id : learner_ids) {
    if (absl::StrContains(message, id)) return true;
  }
  // The aggregator's own conditions (lib/service, lib/aggregation).
  for (const char* condition :
       {"learner(s) ready", "call GetData again", "shutting down"}) {
    if (absl::StrContains(message, condition)) return true;
  }
  return false;
}

std::optional<ProcInfo> ParseProcStat(const std::string& text) {
  // "pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt
  //  cmajflt utime stime cutime cstime priority nice threads itrealvalue
  //  starttime ..."
  const size_t open = text.find('(');
  const size_t close = text.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) {
    return std::nullopt;
  }
  ProcInfo info;
  if (!absl::SimpleAtoi(
          absl::StripAsciiWhitespace(absl::string_view(text).substr(0, open)),
          &info.pid)) {
    return std::nullopt;
  }
  info.comm = text.substr(open + 1, close - open - 1);
  std::vector<absl::string_view> rest = absl::StrSplit(
      absl::string_view(text).substr(close + 1), ' ', absl::SkipEmpty());
  // rest[0] is the state (field 3); starttime is field 22, rest[19].
  if (rest.size() < 20 || rest[0].size() != 1) return std::nullopt;
  info.state = rest[0][0];
  if (!absl::SimpleAtoi(rest[1], &info.ppid) ||
      !absl::SimpleAtoi(rest[19], &info.start_time)) {
    return std::nullopt;
  }
  return info;
}

std::optional<ProcInfo> ReadProc(pid_t pid) {
  bool ok = false;
  const std::string text =
      ReadSmallFile(absl::StrCat("/proc/", pid, "/stat"), &ok);
  if (!ok) return std::nullopt;
  return ParseProcStat(text);
}

std::vector<ProcInfo> ListProcs() {
  std::vector<ProcInfo> procs;
  DIR* dir = opendir("/proc");
  if (dir == nullptr) return procs;
  while (dirent* entry = readdir(dir)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(entry->d_name, &pid)) continue;
    if (auto info = ReadProc(pid)) procs.push_back(*info);
  }
  closedir(dir);
  return procs;
}

bool StillRunning(const ProcInfo& info) {
  const std::optional<ProcInfo> now = ReadProc(info.pid);
  return now.has_value() && now->start_time == info.start_time &&
         now->state != 'Z' && now->state != 'X';
}

int CountFds(pid_t pid) {
  DIR* dir = opendir(absl::StrCat("/proc/", pid, "/fd").c_str());
  if (dir == nullptr) return -1;
  int count = 0;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return count;
}

int CountThreads(pid_t pid) {
  return static_cast<int>(StatusNumber(pid, "Threads"));
}

int64_t RssKiB(pid_t pid) { return StatusNumber(pid, "VmRSS"); }

std::map<std::string, int> ThreadNames(pid_t pid) {
  std::map<std::string, int> names;
  const std::string tasks = absl::StrCat("/proc/", pid, "/task");
  DIR* dir = opendir(tasks.c_str());
  if (dir == nullptr) return names;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    bool ok = false;
    std::string name =
        ReadSmallFile(absl::StrCat(tasks, "/", entry->d_name, "/comm"), &ok);
    if (!ok) continue;  // ended meanwhile
    ++names[std::string(absl::StripTrailingAsciiWhitespace(name))];
  }
  closedir(dir);
  return names;
}

bool IsGrpcPoolThread(const std::string& name) {
  // comm is cut at 15 characters: "default-executo", "resolver-execu...".
  for (const char* prefix : {"default-execut", "resolver-execu", "event_engine",
                             "grpc_global_tim"}) {
    if (absl::StartsWith(name, prefix)) return true;
  }
  return false;
}

int CountThreads(const std::map<std::string, int>& threads, bool grpc_pools) {
  int count = 0;
  for (const auto& [name, n] : threads) {
    if (IsGrpcPoolThread(name) == grpc_pools) count += n;
  }
  return count;
}

std::string ThreadChanges(const std::map<std::string, int>& before,
                          const std::map<std::string, int>& after) {
  std::map<std::string, std::pair<int, int>> both;
  for (const auto& [name, n] : before) both[name].first = n;
  for (const auto& [name, n] : after) both[name].second = n;
  std::vector<std::string> changes;
  for (const auto& [name, counts] : both) {
    if (counts.first != counts.second) {
      changes.push_back(
          absl::StrCat(name, " ", counts.first, " -> ", counts.second));
    }
  }
  return absl::StrJoin(changes, ", ");
}

double RssGrowthPercent(const Figures& f) {
  if (f.rss_baseline_kib <= 0) return 0;
  return 100.0 * static_cast<double>(f.rss_end_kib - f.rss_baseline_kib) /
         static_cast<double>(f.rss_baseline_kib);
}

std::vector<Verdict> Evaluate(const Figures& f, const Limits& limits) {
  std::vector<Verdict> v;
  int64_t failed = 0;
  for (const auto& [status, count] : f.failed_by_status) failed += count;
  v.push_back({"steps", f.steps_run > 0 && f.steps_ok + failed == f.steps_run,
               absl::StrCat(f.steps_run, " run: ", f.steps_ok, " ok, ", failed,
                            " failed")});
  v.push_back(
      {"merged infos line up", f.bad_infos == 0,
       f.bad_infos == 0
           ? "every OK Learn: batch_size entries in sample order"
           : absl::StrCat(f.bad_infos, " wrong; first: ", f.first_bad_info)});
  v.push_back({"failures name what failed", f.unclear_failures == 0,
               f.unclear_failures == 0
                   ? "every failed call names a learner or a condition"
                   : absl::StrCat(f.unclear_failures,
                                  " unclear; first: ", f.first_unclear)});
  v.push_back({"no hangs", f.hangs == 0,
               absl::StrCat(f.hangs, " call(s) past deadline + slack")});
  v.push_back({"recovery", f.recovered && f.recovery_ok == f.recovery_steps,
               f.recovered
                   ? absl::StrCat(f.recovery_ok, " of ", f.recovery_steps,
                                  " steps ok after the chaos")
                   : f.recovery_error});
  const double growth = RssGrowthPercent(f);
  v.push_back(
      {"RSS growth",
       f.rss_baseline_kib > 0 && growth <= limits.max_rss_growth_percent,
       absl::StrCat(Percent(growth), " (limit ",
                    Percent(limits.max_rss_growth_percent), ")")});
  v.push_back({"fds back to baseline",
               f.fds_end >= 0 && f.fds_end <= f.fds_baseline + limits.fd_slack,
               absl::StrCat(f.fds_baseline, " -> ", f.fds_end)});
  v.push_back({"gRPC pools bounded", f.pool_threads_end <= f.pool_threads_limit,
               absl::StrCat(f.pool_threads_end, " threads (at most ",
                            f.pool_threads_limit, ")")});
  v.push_back({"threads back to baseline",
               f.threads_end >= 0 &&
                   f.threads_end <= f.threads_baseline + limits.thread_slack,
               absl::StrCat(f.threads_baseline, " -> ", f.threads_end)});
  v.push_back({"no zombies", f.zombies_end == 0 && f.lingering_zombies == 0,
               absl::StrCat(f.zombies_end, " at the end, ", f.lingering_zombies,
                            " lingering during the run")});
  v.push_back({"daemon stopped cleanly", f.daemon_exit_ok, f.daemon_exit});
  v.push_back({"no leftover processes", f.leftovers == 0,
               f.leftovers == 0
                   ? "none"
                   : absl::StrCat(f.leftovers, ": ", f.leftover_list)});
  return v;
}

std::string FormatTable(const Figures& f, const std::vector<Verdict>& v) {
  std::string out;
  auto row = [&out](const std::string& name, const std::string& value) {
    absl::StrAppend(&out, absl::StrFormat("  %-28s %s\n", name, value));
  };
  out += "soak figures\n";
  row("steps",
      absl::StrCat(f.steps_run, " of ", f.steps_requested,
                   f.time_bound_hit ? " (time bound reached)" : "", " in ",
                   absl::StrFormat("%.1f", f.wall_seconds), " s"));
  row("steps ok", absl::StrCat(f.steps_ok));
  for (const auto& [status, count] : f.failed_by_status) {
    row(absl::StrCat("failed ", status), absl::StrCat(count));
  }
  row("bad merged infos", absl::StrCat(f.bad_infos));
  row("unclear failures", absl::StrCat(f.unclear_failures));
  row("step latency p50/p99/max",
      absl::StrFormat("%.1f / %.1f / %.1f ms", f.p50_step_ms, f.p99_step_ms,
                      f.max_step_ms));
  row("latest call vs deadline",
      absl::StrFormat("%+.1f ms", f.max_call_over_deadline_ms));
  row("hangs", absl::StrCat(f.hangs));
  row("recovery steps ok",
      absl::StrCat(f.recovery_ok, " of ", f.recovery_steps));
  row("RSS baseline / end / peak",
      absl::StrCat(f.rss_baseline_kib, " / ", f.rss_end_kib, " / ",
                   f.rss_peak_kib, " KiB"));
  row("RSS growth", Percent(RssGrowthPercent(f)));
  if (!f.rss_samples.empty()) {
    std::vector<std::string> samples;
    for (const auto& [step, kib] : f.rss_samples) {
      samples.push_back(absl::StrCat(step, ":", kib));
    }
    row("RSS by step (KiB)", absl::StrJoin(samples, " "));
  }
  row("fds baseline / end", absl::StrCat(f.fds_baseline, " / ", f.fds_end));
  row("threads baseline / end",
      absl::StrCat(f.threads_baseline, " / ", f.threads_end, " + gRPC pools ",
                   f.pool_threads_end, " of at most ", f.pool_threads_limit,
                   f.thread_changes.empty() ? "" : " (", f.thread_changes,
                   f.thread_changes.empty() ? "" : ")"));
  row("zombies (end / lingering)",
      absl::StrCat(f.zombies_end, " / ", f.lingering_zombies));
  row("daemon exit", f.daemon_exit);
  row("leftover processes", absl::StrCat(f.leftovers));
  std::vector<std::string> events;
  for (const auto& [event, count] : f.chaos_events) {
    events.push_back(absl::StrCat(event, " ", count));
  }
  row("chaos events", events.empty() ? "none" : absl::StrJoin(events, ", "));
  if (!f.example_message.empty()) {
    out += "example failures\n";
    for (const auto& [status, message] : f.example_message) {
      absl::StrAppend(&out, "  ", status, ": ", message.substr(0, 300), "\n");
    }
  }
  out += "checks\n";
  bool all = true;
  for (const Verdict& verdict : v) {
    all = all && verdict.passed;
    absl::StrAppend(&out, absl::StrFormat("  %-4s %-26s %s\n",
                                          verdict.passed ? "ok" : "FAIL",
                                          verdict.check, verdict.detail));
  }
  absl::StrAppend(&out, all ? "soak passed\n" : "soak FAILED\n");
  return out;
}

}  // namespace aggregator::soak
