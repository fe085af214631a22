// Reloader: runs configuration reloads one at a time, on a thread of its own,
// in the order they were asked for, so that a reload asked for later always
// applies later: the file's newest content is what runs.
//
// Requests that wait while a reload runs are served together by the next one
// (it reads the file after all of them were made), and each gets that
// reload's result: "the last request wins, its reply says what was applied".
// Reading the file never happens on the caller's thread, so the signal loop
// that asks for a SIGHUP reload stays free to handle SIGTERM.
//
// Thread-safety: all methods may be called from any thread.
#ifndef LIB_SERVER_RELOADER_H_
#define LIB_SERVER_RELOADER_H_

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "lib/base/mutex.h"
#include "lib/server/admin_service.h"

namespace aggregator {

class Reloader {
 public:
  using Reload = std::function<absl::StatusOr<ReloadResult>()>;

  explicit Reloader(Reload reload);
  // Stop().
  ~Reloader();
  Reloader(const Reloader&) = delete;
  Reloader& operator=(const Reloader&) = delete;

  // Asks for a reload and returns at once (SIGHUP).
  void RequestAsync();
  // Asks for a reload and waits for the result of the one that serves it.
  // DEADLINE_EXCEEDED when it has not finished by `deadline` (it still runs);
  // UNAVAILABLE once stopping.
  absl::StatusOr<ReloadResult> Request(
      std::chrono::steady_clock::time_point deadline);

  // How many Request() calls wait for a reload that has not started yet.
  int QueuedRequests();

  // Lets a reload in progress finish, answers requests still waiting with
  // UNAVAILABLE and ends the thread. Idempotent.
  void Stop();

 private:
  // The requests one reload serves, and its result.
  struct Batch {
    int requests = 0;  // Request() calls waiting for it
    std::optional<absl::StatusOr<ReloadResult>> result;
  };

  void Run();

  const Reload reload_;
  Mutex mu_;
  std::shared_ptr<Batch> waiting_ ABSL_GUARDED_BY(mu_);  // not yet started
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace aggregator

#endif  // LIB_SERVER_RELOADER_H_
