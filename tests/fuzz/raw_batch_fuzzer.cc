// libFuzzer target: the Learn header scanner (lib/aggregation/raw_batch).
//
// The input is a serialized LearnRequest (any bytes), followed by a trailer
// that FuzzedDataProvider reads from the end: the sample limit and a seed for
// how the bytes are sliced (as gRPC may deliver them) and how the batch is
// cut. Checked on every input:
// - Scan never crashes or reads out of bounds (ASan), and it accepts exactly
//   what a straightforward reference reader of the documented format accepts,
//   with the same sample count and plan_id;
// - when it succeeds, Cut into random part sizes gives parts that, read back,
//   hold the batch's sample records in order (part 0 the first counts[0], ...)
//   byte for byte, then only their own plan_id; sample_bytes is their size;
// - Cut with counts that do not add up is an error, not a crash.
#include <fuzzer/FuzzedDataProvider.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "lib/aggregation/raw_batch.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using aggregator::RawBatch;

// What Scan documents, read the plain way from one contiguous string.
struct Reference {
  bool ok = false;
  std::vector<std::string> samples;  // each sample's whole record
  std::string plan_id;
};

// At most `max_bytes` bytes: protobuf's parser takes tags and lengths of up
// to 5, other varints of up to 10 (lib/aggregation/wire_reader.h).
bool ReadVarint(const std::string& bytes, size_t* at, uint64_t* value,
                int max_bytes = 10) {
  *value = 0;
  for (int i = 0; i < max_bytes; ++i) {
    if (*at >= bytes.size()) return false;
    const uint8_t byte = static_cast<uint8_t>(bytes[(*at)++]);
    *value |= static_cast<uint64_t>(byte & 0x7f) << (7 * i);
    if ((byte & 0x80) == 0) return true;
  }
  return false;
}

Reference ReadReference(const std::string& bytes, int64_t max_samples) {
  Reference ref;
  size_t at = 0;
  int others = 0;
  while (at < bytes.size()) {
    const size_t begin = at;
    uint64_t tag;
    if (!ReadVarint(bytes, &at, &tag, 5) || tag > UINT32_MAX) return ref;
    const uint64_t number = tag >> 3;
    const int type = static_cast<int>(tag & 7);
    if (number == 0) return ref;
    if (number != 1 && ++others > 16) return ref;
    uint64_t length = 0;
    if (type == 0) {
      uint64_t ignored;
      if (!ReadVarint(bytes, &at, &ignored)) return ref;
    } else if (type == 1) {
      length = 8;
    } else if (type == 5) {
      length = 4;
    } else if (type == 2) {
      if (!ReadVarint(bytes, &at, &length, 5) || length > INT32_MAX - 16) {
        return ref;
      }
    } else {
      return ref;
    }
    if ((number == 1 || number == 2) && type != 2) return ref;
    if (number == 2 && length > 1024) return ref;
    if (length > bytes.size() - at) return ref;
    if (number == 1) {
      if (static_cast<int64_t>(ref.samples.size()) + 1 > max_samples) {
        return ref;
      }
      ref.samples.push_back(bytes.substr(begin, at + length - begin));
    } else if (number == 2) {
      ref.plan_id = bytes.substr(at, length);
    }
    at += length;
  }
  ref.ok = true;
  return ref;
}

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::string out;
  std::vector<grpc::Slice> slices;
  if (!buffer.Valid()) return out;
  FUZZ_CHECK(buffer.Dump(&slices).ok());
  for (const grpc::Slice& slice : slices) {
    out.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return out;
}

// A plan id of 0 to 300 bytes (longer than 127 needs a two-byte length).
std::string PlanId(std::mt19937& random) {
  const int kind = random() % 4;
  if (kind == 0) return "";
  const size_t size = kind == 1 ? 1 + random() % 8 : random() % 301;
  std::string id(size, '\0');
  for (char& c : id) c = static_cast<char>(random());
  return id;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider input(data, size);
  // The trailer, from the end: limit and shape seed.
  const int64_t max_samples = input.ConsumeIntegralInRange<int64_t>(-1, 1000);
  const uint32_t seed = input.ConsumeIntegral<uint32_t>();
  const std::string message = input.ConsumeRemainingBytesAsString();
  std::mt19937 random(seed);

  // The message in slices of random sizes (empty ones included).
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < message.size();) {
    const size_t take = random() % 4 == 0 ? 0 : 1 + random() % 64;
    const size_t n = std::min(take, message.size() - at);
    slices.emplace_back(message.data() + at, n);
    at += n;
  }
  if (random() % 8 == 0) slices.emplace_back(message.data(), 0);
  const grpc::ByteBuffer buffer(slices.data(), slices.size());

  const Reference ref = ReadReference(message, max_samples);
  absl::StatusOr<RawBatch> batch = RawBatch::Scan(buffer, max_samples);
  if (!batch.ok()) {
    if (ref.ok) {
      std::fprintf(stderr, "Scan refused a valid request: %s\n",
                   batch.status().ToString().c_str());
    }
    FUZZ_CHECK(!ref.ok);
    FUZZ_CHECK(batch.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  FUZZ_CHECK(ref.ok);
  FUZZ_CHECK(batch->sample_count() == ref.samples.size());
  FUZZ_CHECK(batch->plan_id() == ref.plan_id);
  FUZZ_CHECK(batch->size() == message.size());

  // Random parts, some empty, adding up to the sample count.
  const size_t part_count = 1 + random() % 5;
  std::vector<size_t> counts(part_count, 0);
  for (size_t i = 0; i < batch->sample_count(); ++i) {
    ++counts[random() % part_count];
  }
  std::vector<std::string> plan_ids;
  for (size_t i = 0; i < part_count; ++i) plan_ids.push_back(PlanId(random));

  absl::StatusOr<std::vector<RawBatch::Part>> parts =
      batch->Cut(counts, plan_ids);
  FUZZ_CHECK(parts.ok());
  FUZZ_CHECK(parts->size() == part_count);
  size_t next = 0;  // the next sample of the batch
  for (size_t i = 0; i < part_count; ++i) {
    const RawBatch::Part& part = (*parts)[i];
    const std::string bytes = Flatten(part.request);
    // Read back: exactly counts[i] samples, the next ones, then its plan_id.
    const Reference got = ReadReference(bytes, 1 << 30);
    FUZZ_CHECK(got.ok);
    FUZZ_CHECK(got.samples.size() == counts[i]);
    FUZZ_CHECK(got.plan_id == plan_ids[i]);
    std::string expected;
    size_t sample_bytes = 0;
    for (size_t j = 0; j < counts[i]; ++j) {
      FUZZ_CHECK(got.samples[j] == ref.samples[next + j]);
      expected += ref.samples[next + j];
      sample_bytes += ref.samples[next + j].size();
    }
    next += counts[i];
    FUZZ_CHECK(part.sample_bytes == sample_bytes);
    // Nothing but the samples and the plan_id field.
    FUZZ_CHECK(bytes.compare(0, expected.size(), expected) == 0);
    const size_t id_field =
        plan_ids[i].empty()
            ? 0
            : 1 + (plan_ids[i].size() < 128 ? 1 : 2) + plan_ids[i].size();
    FUZZ_CHECK(bytes.size() == expected.size() + id_field);
  }
  FUZZ_CHECK(next == batch->sample_count());

  // Counts that do not add up, or plan ids that do not match: errors.
  std::vector<size_t> wrong = counts;
  ++wrong[random() % part_count];
  FUZZ_CHECK(!batch->Cut(wrong, plan_ids).ok());
  if (part_count > 1) {
    FUZZ_CHECK(!batch->Cut(counts, {plan_ids[0]}).ok());
  }
  return 0;
}
