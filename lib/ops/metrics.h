// A small Prometheus registry: counter, gauge and histogram families with
// labels, rendered in the text exposition format (version 0.0.4).
//
// Series are created on first use and never removed, so a series handle (the
// pointer returned by WithLabels) stays valid for the registry's lifetime; hot
// paths can keep one and update it without a lookup. Updates are atomic or
// guarded per series; rendering takes each family's lock briefly.
//
// Thread-safety: every method may be called from any thread.
#ifndef LIB_OPS_METRICS_H_
#define LIB_OPS_METRICS_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"

namespace aggregator {

class Counter {
 public:
  void Increment(double by = 1);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Gauge {
 public:
  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Histogram {
 public:
  explicit Histogram(const std::vector<double>* bounds);
  void Observe(double value);

 private:
  friend class MetricsRegistry;
  const std::vector<double>* bounds_;  // upper bounds, ascending; +Inf implied
  mutable std::mutex mu_;
  std::vector<uint64_t> buckets_ ABSL_GUARDED_BY(mu_);  // not cumulative
  uint64_t count_ ABSL_GUARDED_BY(mu_) = 0;
  double sum_ ABSL_GUARDED_BY(mu_) = 0;
};

// A family: one metric name, one set of label names, one series per label
// values.
template <typename Series>
class Family {
 public:
  Family(std::string name, std::string help, std::vector<std::string> labels,
         std::function<std::unique_ptr<Series>()> make)
      : name_(std::move(name)),
        help_(std::move(help)),
        labels_(std::move(labels)),
        make_(std::move(make)) {}

  // The series for these label values (as many as the family's label names).
  Series* WithLabels(const std::vector<std::string>& values) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& series = series_[values];
    if (series == nullptr) series = make_();
    return series.get();
  }

  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }

 private:
  friend class MetricsRegistry;
  const std::string name_;
  const std::string help_;
  const std::vector<std::string> labels_;
  const std::function<std::unique_ptr<Series>()> make_;
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<Series>> series_
      ABSL_GUARDED_BY(mu_);
};

class MetricsRegistry {
 public:
  // Latency buckets in seconds, 100 µs .. 60 s.
  static const std::vector<double>& LatencyBuckets();

  Family<Counter>* AddCounter(std::string name, std::string help,
                              std::vector<std::string> labels = {});
  Family<Gauge>* AddGauge(std::string name, std::string help,
                          std::vector<std::string> labels = {});
  Family<Histogram>* AddHistogram(std::string name, std::string help,
                                  std::vector<std::string> labels,
                                  const std::vector<double>* bounds);
  // Runs before each Render: sets gauges (or counters) from other state.
  void AddCollector(std::function<void()> collect);

  // The text exposition of every family, in registration order.
  std::string Render() const;

 private:
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Family<Counter>>> counters_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Family<Gauge>>> gauges_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Family<Histogram>>> histograms_
      ABSL_GUARDED_BY(mu_);
  // (kind, index) in registration order: 0 counter, 1 gauge, 2 histogram.
  std::vector<std::pair<int, size_t>> order_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void()>> collectors_ ABSL_GUARDED_BY(mu_);
};

}  // namespace aggregator

#endif  // LIB_OPS_METRICS_H_
