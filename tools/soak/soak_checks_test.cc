// tools/soak's checks: the merged-info check accepts what a real aggregator
// over example learners returns and rejects every misalignment; failure
// statuses; /proc parsing; the verdicts.
#include "tools/soak/soak_checks.h"

#include <sys/types.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <utility>

#include "tests/testing/test_cluster.h"

using namespace aggregator::testing;
namespace pb = aggregator::v1;
namespace soak = aggregator::soak;

namespace {

google::protobuf::ListValue* PriorityList(pb::LearnReply& reply,
                                          const char* key) {
  return (*(*reply.mutable_info()->mutable_fields())["priority_info"]
               .mutable_struct_value()
               ->mutable_fields())[key]
      .mutable_list_value();
}

// A real aggregator over learners demanding 3 and 5 samples: one step.
struct Step {
  pb::LearnRequest request;
  pb::LearnReply reply;
};

Step RealStep() {
  aggregator::ExampleLearnerOptions three;
  three.batch_size = 3;
  aggregator::ExampleLearnerOptions five;
  five.batch_size = 5;
  auto a = StartLearner(three);
  auto b = StartLearner(five);
  auto server = StartReadyAggregator(FastConfig(
      {Endpoint("lrn-a", a->address), Endpoint("lrn-b", b->address)}, 2));
  auto stub = LearnerStub(server->address());
  pb::DataDemand demand;
  REQUIRE(stub->GetData(Deadline().get(), pb::GetDataRequest(), &demand).ok());
  REQUIRE(demand.batch_size() == 8);
  Step step;
  step.request = Batch(8, "s1-", 100);
  step.request.set_plan_id(demand.plan_id());
  const grpc::Status status =
      stub->Learn(Deadline().get(), step.request, &step.reply);
  INFO(status.error_message());
  REQUIRE(status.ok());
  return step;
}

}  // namespace

TEST_CASE(
    "The merged-info check accepts a real merged info and no misaligned "
    "one") {
  Step step = RealStep();
  INFO(step.reply.DebugString());
  REQUIRE(soak::CheckLearnReply(step.request, step.reply).ok());

  SECTION("two ids swapped") {
    auto* ids = PriorityList(step.reply, "replay_unique_id");
    ids->mutable_values(2)->Swap(ids->mutable_values(3));
    const absl::Status s = soak::CheckLearnReply(step.request, step.reply);
    CHECK_THAT(std::string(s.message()),
               Catch::Matchers::Contains("replay_unique_id[2] is 's1-3'"));
  }
  SECTION("two priorities swapped") {
    auto* priorities = PriorityList(step.reply, "priority");
    // Different data, different priorities.
    REQUIRE(priorities->values(0).number_value() !=
            priorities->values(7).number_value());
    priorities->mutable_values(0)->Swap(priorities->mutable_values(7));
    const absl::Status s = soak::CheckLearnReply(step.request, step.reply);
    CHECK_THAT(std::string(s.message()),
               Catch::Matchers::Contains("priority[0]"));
  }
  SECTION("a priority missing") {
    PriorityList(step.reply, "priority")->mutable_values()->RemoveLast();
    const absl::Status s = soak::CheckLearnReply(step.request, step.reply);
    CHECK(std::string(s.message()) ==
          "priority_info.priority has 7 entries for 8 samples");
  }
  SECTION("an id missing") {
    PriorityList(step.reply, "replay_unique_id")
        ->mutable_values()
        ->RemoveLast();
    CHECK_FALSE(soak::CheckLearnReply(step.request, step.reply).ok());
  }
  SECTION("no priority list") {
    (*step.reply.mutable_info()->mutable_fields())["priority_info"]
        .mutable_struct_value()
        ->mutable_fields()
        ->erase("priority");
    CHECK_FALSE(soak::CheckLearnReply(step.request, step.reply).ok());
  }
  SECTION("the learners received fewer samples than sent") {
    auto& received = (*step.reply.mutable_info()->mutable_fields())["received"];
    REQUIRE(received.list_value().values_size() == 2);
    received.mutable_list_value()->mutable_values(1)->set_number_value(4);
    const absl::Status s = soak::CheckLearnReply(step.request, step.reply);
    CHECK_THAT(std::string(s.message()),
               Catch::Matchers::Contains("received 7 samples in all, not 8"));
  }
  SECTION("an info for another batch") {
    pb::LearnRequest other = Batch(8, "s2-", 100);
    CHECK_FALSE(soak::CheckLearnReply(other, step.reply).ok());
  }
}

TEST_CASE("A failure names what failed, or it is unclear") {
  const std::vector<std::string> ids = {"lrn-a-0", "lrn-b-1"};
  auto status = [](grpc::StatusCode code, const std::string& message) {
    return grpc::Status(code, message);
  };
  CHECK(soak::NamesWhatFailed(
      status(grpc::StatusCode::DEADLINE_EXCEEDED,
             "Learn failed on 1 of 4 learner(s): lrn-b-1 (127.0.0.1:5): "
             "DEADLINE_EXCEEDED: Deadline Exceeded"),
      ids));
  CHECK(soak::NamesWhatFailed(
      status(grpc::StatusCode::UNAVAILABLE,
             "GetData: 0 of 4 learner(s) ready, 1 needed (min_learners 1)"),
      ids));
  CHECK(soak::NamesWhatFailed(
      status(grpc::StatusCode::FAILED_PRECONDITION,
             "plan 'x-1' already used: a plan trains once; call GetData again"),
      ids));
  CHECK_FALSE(soak::NamesWhatFailed(
      status(grpc::StatusCode::DEADLINE_EXCEEDED, "Deadline Exceeded"), ids));
  CHECK_FALSE(
      soak::NamesWhatFailed(status(grpc::StatusCode::UNAVAILABLE, ""), ids));
  CHECK_FALSE(soak::NamesWhatFailed(
      status(grpc::StatusCode::UNAVAILABLE, "Socket closed"), ids));
  CHECK_FALSE(soak::NamesWhatFailed(grpc::Status::OK, ids));
}

TEST_CASE("/proc/<pid>/stat is parsed, odd command names included") {
  const std::string text =
      "4242 (a) b (c) Z 17 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 "
      "987654 0 0";
  const std::optional<soak::ProcInfo> info = soak::ParseProcStat(text);
  REQUIRE(info.has_value());
  CHECK(info->pid == 4242);
  CHECK(info->comm == "a) b (c");
  CHECK(info->state == 'Z');
  CHECK(info->ppid == 17);
  CHECK(info->start_time == 987654);
  CHECK_FALSE(soak::ParseProcStat("4242 (short) S 1 2").has_value());

  const std::optional<soak::ProcInfo> self = soak::ReadProc(getpid());
  REQUIRE(self.has_value());
  CHECK(self->ppid == getppid());
  CHECK(soak::StillRunning(*self));
  soak::ProcInfo reused = *self;
  reused.start_time += 1;  // the same pid, another process
  CHECK_FALSE(soak::StillRunning(reused));
  CHECK(soak::CountFds(getpid()) > 2);
  CHECK(soak::CountThreads(getpid()) >= 1);
  CHECK(soak::RssKiB(getpid()) > 0);
  int threads = 0;
  const std::map<std::string, int> names = soak::ThreadNames(getpid());
  for (const auto& [name, count] : names) {
    threads += count;
  }
  CHECK(threads == soak::CountThreads(getpid()));
  CHECK(soak::CountThreads(names, false) + soak::CountThreads(names, true) ==
        threads);
  CHECK(soak::IsGrpcPoolThread("default-executo"));
  CHECK(soak::IsGrpcPoolThread("event_engine"));
  CHECK_FALSE(soak::IsGrpcPoolThread("aggregatord"));
  CHECK(soak::ThreadChanges({{"a", 1}, {"b", 2}}, {{"b", 3}, {"c", 1}}) ==
        "a 1 -> 0, b 2 -> 3, c 0 -> 1");
}

TEST_CASE("The soak's verdicts fail on each figure out of bounds") {
  soak::Figures good;
  good.steps_requested = 10;
  good.steps_run = 10;
  good.steps_ok = 8;
  good.failed_by_status["Learn INTERNAL"] = 2;
  good.recovered = true;
  good.recovery_steps = 5;
  good.recovery_ok = 5;
  good.rss_baseline_kib = 1000;
  good.rss_end_kib = 1100;  // 10 %: allowed
  good.fds_baseline = good.fds_end = 20;
  good.threads_baseline = good.threads_end = 20;
  good.daemon_exit_ok = true;
  const soak::Limits limits;
  auto failed = [&](const soak::Figures& f) {
    std::vector<std::string> names;
    for (const soak::Verdict& v : soak::Evaluate(f, limits)) {
      if (!v.passed) names.push_back(v.check);
    }
    return names;
  };
  CHECK(failed(good).empty());
  CHECK_THAT(soak::FormatTable(good, soak::Evaluate(good, limits)),
             Catch::Matchers::EndsWith("soak passed\n"));

  soak::Figures f = good;
  f.rss_end_kib = 1101;
  CHECK(failed(f) == std::vector<std::string>{"RSS growth"});
  f = good;
  f.fds_end = 21;
  CHECK(failed(f) == std::vector<std::string>{"fds back to baseline"});
  f = good;
  f.threads_end = 21;
  CHECK(failed(f) == std::vector<std::string>{"threads back to baseline"});
  f = good;
  f.pool_threads_end = 9;
  f.pool_threads_limit = 8;
  CHECK(failed(f) == std::vector<std::string>{"gRPC pools bounded"});
  f = good;
  f.hangs = 1;
  CHECK(failed(f) == std::vector<std::string>{"no hangs"});
  f = good;
  f.bad_infos = 1;
  CHECK(failed(f) == std::vector<std::string>{"merged infos line up"});
  f = good;
  f.unclear_failures = 1;
  CHECK(failed(f) == std::vector<std::string>{"failures name what failed"});
  f = good;
  f.recovery_ok = 4;
  CHECK(failed(f) == std::vector<std::string>{"recovery"});
  f = good;
  f.lingering_zombies = 1;
  CHECK(failed(f) == std::vector<std::string>{"no zombies"});
  f = good;
  f.leftovers = 1;
  CHECK(failed(f) == std::vector<std::string>{"no leftover processes"});
  f = good;
  f.daemon_exit_ok = false;
  CHECK(failed(f) == std::vector<std::string>{"daemon stopped cleanly"});
  f = good;
  f.steps_ok = 7;  // a step neither ok nor failed
  CHECK(failed(f) == std::vector<std::string>{"steps"});
  CHECK_THAT(soak::FormatTable(f, soak::Evaluate(f, limits)),
             Catch::Matchers::EndsWith("soak FAILED\n"));
}
