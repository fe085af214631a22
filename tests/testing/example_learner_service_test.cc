// The example learner's fault file: faults that change while it runs (what
// tools/soak uses to slow learners down and make them err).
#include <stdio.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <string>

#include "tests/testing/process_helpers.h"
#include "tests/testing/test_cluster.h"

using namespace aggregator::testing;
namespace pb = aggregator::v1;

namespace {

// Written elsewhere, then renamed into place, as the soak does.
void PutFaults(const std::string& path, const std::string& text) {
  WriteFile(path + ".tmp", text);
  REQUIRE(rename((path + ".tmp").c_str(), path.c_str()) == 0);
}

grpc::Status GetData(pb::Learner::Stub& stub) {
  pb::DataDemand demand;
  return stub.GetData(Deadline().get(), pb::GetDataRequest(), &demand);
}

grpc::Status Learn(pb::Learner::Stub& stub) {
  pb::LearnReply reply;
  return stub.Learn(Deadline().get(), Batch(4, "id-"), &reply);
}

}  // namespace

TEST_CASE("A fault file changes the example learner's faults while it runs") {
  const std::string dir = TempDir();
  const std::string path = dir + "/faults";
  aggregator::ExampleLearnerOptions options;
  options.fault_file = path;
  options.fail_on = "GetData";  // the flags' fault, while there is no file
  auto learner = StartLearner(options);
  auto stub = LearnerStub(learner->address);

  CHECK(GetData(*stub).error_code() == grpc::StatusCode::INTERNAL);
  CHECK(Learn(*stub).ok());

  PutFaults(path, "fail_on=Learn\n");
  CHECK(GetData(*stub).ok());
  const grpc::Status failed = Learn(*stub);
  CHECK(failed.error_code() == grpc::StatusCode::INTERNAL);
  CHECK(failed.error_message() == "injected failure in Learn");

  PutFaults(path, "delay_ms=300 delay_on=GetData");
  auto started = Clock::now();
  CHECK(Learn(*stub).ok());
  CHECK(Clock::now() - started < milliseconds(300));
  started = Clock::now();
  CHECK(GetData(*stub).ok());
  CHECK(Clock::now() - started >= milliseconds(300));

  PutFaults(path, "");  // an empty file: no fault at all
  CHECK(GetData(*stub).ok());
  CHECK(Learn(*stub).ok());

  PutFaults(path, "fail_on=Nothing");
  const grpc::Status bad = Learn(*stub);
  CHECK(bad.error_code() == grpc::StatusCode::INTERNAL);
  CHECK_THAT(bad.error_message(),
             Catch::Matchers::Contains("fault file " + path) &&
                 Catch::Matchers::Contains("bad fault setting 'fail_on="
                                           "Nothing'"));

  REQUIRE(unlink(path.c_str()) == 0);  // back to the flags
  CHECK(GetData(*stub).error_code() == grpc::StatusCode::INTERNAL);

  REQUIRE(mkfifo(path.c_str(), 0600) == 0);  // never blocks on a FIFO
  const grpc::Status fifo = Learn(*stub);
  CHECK(fifo.error_code() == grpc::StatusCode::INTERNAL);
  CHECK_THAT(fifo.error_message(),
             Catch::Matchers::Contains("is not a regular file"));
  unlink(path.c_str());
}

TEST_CASE("Fault settings parse, and malformed ones are refused") {
  auto faults = aggregator::ParseFaults(
      " delay_ms=25\tdelay_on=Learn\n"
      "fail_on=CloseTask ");
  REQUIRE(faults.ok());
  CHECK(faults->delay == milliseconds(25));
  CHECK(faults->delay_on == "Learn");
  CHECK(faults->fail_on == "CloseTask");
  CHECK(aggregator::ParseFaults("").ok());
  CHECK_FALSE(aggregator::ParseFaults("delay_ms=-1").ok());
  CHECK_FALSE(aggregator::ParseFaults("delay_ms=x").ok());
  CHECK_FALSE(aggregator::ParseFaults("delay_on=learn").ok());
  CHECK_FALSE(aggregator::ParseFaults("crash").ok());
}
