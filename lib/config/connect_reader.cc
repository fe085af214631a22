#include "lib/config/connect_reader.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "lib/config/backoff_reader.h"
#include "lib/config/typed_readers.h"

namespace aggregator {
namespace {

// gRPC servers' default policy refuses pings more often than every 5 minutes
// (without calls); ours and the documented settings accept one a second.
constexpr std::chrono::milliseconds kMinKeepaliveTime{1000};

// connect.keepalive: {time, timeout}.
void ReadKeepalive(YamlReader* reader, const Field& field,
                   ConnectConfig* connect) {
  reader->ReadMap(
      field, {
                 {"time",
                  [&](const Field& f) {
                    std::chrono::milliseconds time{0};
                    if (!ReadDuration(reader, f, &time)) return;
                    if (time < kMinKeepaliveTime) {
                      reader->Error(
                          f,
                          absl::StrCat("must be at least 1s (gRPC servers take "
                                       "more frequent pings for abuse), got ",
                                       Quote(f.node.Scalar())));
                      return;
                    }
                    connect->keepalive_time = time;
                  }},
                 {"timeout",
                  [&](const Field& f) {
                    ReadDuration(reader, f, &connect->keepalive_timeout);
                  }},
             });
}

}  // namespace

void ReadConnect(YamlReader* reader, const Field& field,
                 ConnectConfig* connect) {
  reader->ReadMap(
      field,
      {
          {"timeout",
           [&](const Field& f) { ReadDuration(reader, f, &connect->timeout); }},
          {"attempt_timeout",
           [&](const Field& f) {
             ReadDuration(reader, f, &connect->attempt_timeout);
           }},
          {"backoff",
           [&](const Field& f) {
             ReadBackoff(reader, f, /*with_jitter=*/true, &connect->backoff);
           }},
          {"keepalive",
           [&](const Field& f) { ReadKeepalive(reader, f, connect); }},
      });
}

}  // namespace aggregator
