// LogCapture: an spdlog sink that keeps every message so tests can wait for
// one (with a deadline) instead of sleeping.
#ifndef TESTS_TESTING_LOG_CAPTURE_H_
#define TESTS_TESTING_LOG_CAPTURE_H_

#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace aggregator::testing {

class CaptureSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  // Waits until a message starting with `prefix` has been logged after the
  // first `skip` such messages; returns it, or "" at the deadline.
  std::string WaitFor(const std::string& prefix, size_t skip,
                      std::chrono::steady_clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(lines_mu_);
    std::string found;
    changed_.wait_until(lock, deadline, [&] {
      size_t seen = 0;
      for (const std::string& line : lines_) {
        if (line.compare(0, prefix.size(), prefix) == 0 && seen++ == skip) {
          found = line;
          return true;
        }
      }
      return false;
    });
    return found;
  }

  // How many messages so far start with `prefix`.
  size_t Count(const std::string& prefix) {
    std::lock_guard<std::mutex> lock(lines_mu_);
    size_t count = 0;
    for (const std::string& line : lines_) {
      count += line.compare(0, prefix.size(), prefix) == 0 ? 1 : 0;
    }
    return count;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    std::lock_guard<std::mutex> lock(lines_mu_);
    lines_.emplace_back(msg.payload.data(), msg.payload.size());
    changed_.notify_all();
  }
  void flush_() override {}

 private:
  std::mutex lines_mu_;
  std::condition_variable changed_;
  std::vector<std::string> lines_;
};

// The process-wide capture, installed as spdlog's default logger (echoing to
// stderr for the test log) on first use.
inline CaptureSink& CapturedLogs() {
  static CaptureSink* sink = [] {
    auto capture = std::make_shared<CaptureSink>();
    auto logger = std::make_shared<spdlog::logger>(
        "test",
        spdlog::sinks_init_list{
            capture, std::make_shared<spdlog::sinks::stderr_sink_mt>()});
    logger->set_level(spdlog::level::trace);
    spdlog::set_default_logger(logger);
    return capture.get();
  }();
  return *sink;
}

}  // namespace aggregator::testing

#endif  // TESTS_TESTING_LOG_CAPTURE_H_
