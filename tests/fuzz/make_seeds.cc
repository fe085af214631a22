// Writes the seed inputs of tests/fuzz/corpus/ that are made rather than
// written by hand: real serialized LearnRequests
// (tests/testing/synthetic_batch) for raw_batch_fuzzer and real worker frames
// for worker_channel_fuzzer, each followed by the trailer its fuzzer reads from
// the end.
//   make_seeds <corpus dir>   writes <dir>/raw_batch_fuzzer/* and
//                             <dir>/worker_channel_fuzzer/*
#include <google/protobuf/struct.pb.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

#include "proto/learner.pb.h"
#include "proto/worker.pb.h"
#include "tests/testing/synthetic_batch.h"

namespace {

void Write(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "make_seeds: cannot write %s\n", path.c_str());
    std::exit(1);
  }
}

// raw_batch_fuzzer's trailer: a seed (4 bytes), then max_samples as 2 bytes
// read from the end (here 999).
std::string RawBatchSeed(const std::string& message, uint32_t seed) {
  std::string out = message;
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(seed >> (8 * i)));
  out.push_back(static_cast<char>(0xE8));
  out.push_back(static_cast<char>(0x03));
  return out;
}

// One frame: 4-byte little-endian length, then the message.
std::string Frame(const google::protobuf::MessageLite& message) {
  const std::string body = message.SerializeAsString();
  std::string out;
  for (int i = 0; i < 4; ++i) {
    out.push_back(static_cast<char>(body.size() >> (8 * i)));
  }
  return out + body;
}

// worker_channel_fuzzer's trailer: a seed (4 bytes), the message type (1 =
// WorkerRequest, 0 = WorkerReply), 1 (keep the limit), then the limit 65536
// as 3 bytes read from the end.
std::string ChannelSeed(const std::string& stream, bool request,
                        uint32_t seed) {
  std::string out = stream;
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(seed >> (8 * i)));
  out.push_back(request ? 1 : 0);
  out.push_back(1);
  out.push_back(0);
  out.push_back(0);
  out.push_back(1);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds <corpus dir>\n");
    return 2;
  }
  const std::string dir = argv[1];
  using aggregator::SyntheticBatch;
  namespace pb = aggregator::v1;

  const std::string raw = dir + "/raw_batch_fuzzer/";
  pb::LearnRequest small = SyntheticBatch(4, 16, "id");
  small.set_plan_id("plan-7");
  Write(raw + "synthetic_4x16_plan",
        RawBatchSeed(small.SerializeAsString(), 1));
  Write(raw + "synthetic_32x0",
        RawBatchSeed(SyntheticBatch(32, 0, "r").SerializeAsString(), 2));
  Write(raw + "synthetic_3x300",
        RawBatchSeed(SyntheticBatch(3, 300, "big").SerializeAsString(), 3));
  // A plan_id between samples and twice (the last wins).
  pb::LearnRequest first = SyntheticBatch(2, 8, "a");
  first.set_plan_id("old");
  pb::LearnRequest second = SyntheticBatch(2, 8, "b");
  second.set_plan_id("new");
  Write(
      raw + "two_plan_ids",
      RawBatchSeed(first.SerializeAsString() + second.SerializeAsString(), 4));
  Write(raw + "empty", RawBatchSeed("", 5));

  const std::string channel = dir + "/worker_channel_fuzzer/";
  pb::WorkerRequest call;
  call.set_req_id("7");
  call.set_method("learn");
  call.mutable_args()->add_values()->set_number_value(3);
  call.mutable_args()->add_values()->set_string_value("x");
  pb::WorkerRequest shutdown;
  shutdown.set_req_id("8");
  shutdown.set_method("_shutdown");
  Write(channel + "requests",
        ChannelSeed(Frame(call) + Frame(shutdown), true, 1));
  pb::WorkerReply init;
  init.set_method("_init");
  pb::WorkerReply listening;
  listening.set_method("_listening");
  (*listening.mutable_data()->mutable_struct_value()->mutable_fields())["port"]
      .set_number_value(22301);
  pb::WorkerReply failed;
  failed.set_req_id("7");
  failed.set_method("learn");
  failed.mutable_error()->set_kind(pb::WorkerError::KIND_FAILED);
  failed.mutable_error()->set_message("boom");
  Write(channel + "replies",
        ChannelSeed(Frame(init) + Frame(listening) + Frame(failed), false, 2));
  Write(channel + "empty_frame",
        ChannelSeed(Frame(pb::WorkerReply()), false, 3));
  Write(channel + "cut_frame", ChannelSeed(Frame(call).substr(0, 9), true, 4));
  return 0;
}
