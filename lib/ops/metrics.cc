#include "lib/ops/metrics.h"

#include <charconv>
#include <cmath>

namespace aggregator {
namespace {

std::string EscapeLabel(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatNumber(double value) {
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (std::isnan(value)) return "NaN";
  char buffer[64];
  // The shortest text that reads back as the same double.
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

// {a="x",b="y"} plus an optional extra label (le for buckets); empty when none.
std::string Labels(const std::vector<std::string>& names,
                   const std::vector<std::string>& values,
                   const std::string& extra_name = "",
                   const std::string& extra_value = "") {
  std::string out;
  for (size_t i = 0; i < names.size() && i < values.size(); ++i) {
    out += (out.empty() ? "" : ",") + names[i] + "=\"" +
           EscapeLabel(values[i]) + "\"";
  }
  if (!extra_name.empty()) {
    out += (out.empty() ? "" : ",") + extra_name + "=\"" + extra_value + "\"";
  }
  return out.empty() ? "" : "{" + out + "}";
}

template <typename Series>
void Header(std::string& out, const Family<Series>& family, const char* type) {
  out += "# HELP " + family.name() + " " + family.help() + "\n";
  out += "# TYPE " + family.name() + " " + type + "\n";
}

}  // namespace

void Counter::Increment(double by) {
  double current = value_.load(std::memory_order_relaxed);
  while (!value_.compare_exchange_weak(current, current + by,
                                       std::memory_order_relaxed)) {
  }
}

Histogram::Histogram(const std::vector<double>* bounds)
    : bounds_(bounds), buckets_(bounds->size() + 1, 0) {}

void Histogram::Observe(double value) {
  size_t bucket = 0;
  while (bucket < bounds_->size() && value > (*bounds_)[bucket]) ++bucket;
  std::lock_guard<std::mutex> lock(mu_);
  ++buckets_[bucket];
  ++count_;
  sum_ += value;
}

const std::vector<double>& MetricsRegistry::LatencyBuckets() {
  static const std::vector<double> buckets = {
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
      0.1,    0.25,    0.5,    1,     2.5,    5,     10,   30,    60};
  return buckets;
}

Family<Counter>* MetricsRegistry::AddCounter(std::string name, std::string help,
                                             std::vector<std::string> labels) {
  std::lock_guard<std::mutex> lock(mu_);
  counters_.push_back(std::make_unique<Family<Counter>>(
      std::move(name), std::move(help), std::move(labels),
      [] { return std::make_unique<Counter>(); }));
  order_.emplace_back(0, counters_.size() - 1);
  return counters_.back().get();
}

Family<Gauge>* MetricsRegistry::AddGauge(std::string name, std::string help,
                                         std::vector<std::string> labels) {
  std::lock_guard<std::mutex> lock(mu_);
  gauges_.push_back(std::make_unique<Family<Gauge>>(
      std::move(name), std::move(help), std::move(labels),
      [] { return std::make_unique<Gauge>(); }));
  order_.emplace_back(1, gauges_.size() - 1);
  return gauges_.back().get();
}

Family<Histogram>* MetricsRegistry::AddHistogram(
    std::string name, std::string help, std::vector<std::string> labels,
    const std::vector<double>* bounds) {
  std::lock_guard<std::mutex> lock(mu_);
  histograms_.push_back(std::make_unique<Family<Histogram>>(
      std::move(name), std::move(help), std::move(labels),
      [bounds] { return std::make_unique<Histogram>(bounds); }));
  order_.emplace_back(2, histograms_.size() - 1);
  return histograms_.back().get();
}

void MetricsRegistry::AddCollector(std::function<void()> collect) {
  std::lock_guard<std::mutex> lock(mu_);
  collectors_.push_back(std::move(collect));
}

std::string MetricsRegistry::Render() const {
  std::vector<std::function<void()>> collectors;
  {
    std::lock_guard<std::mutex> lock(mu_);
    collectors = collectors_;
  }
  for (const auto& collect : collectors) collect();

  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const auto& [kind, index] : order_) {
    if (kind == 0) {
      const auto& family = *counters_[index];
      Header(out, family, "counter");
      std::lock_guard<std::mutex> family_lock(family.mu_);
      for (const auto& [values, series] : family.series_) {
        out += family.name_ + Labels(family.labels_, values) + " " +
               FormatNumber(series->value()) + "\n";
      }
    } else if (kind == 1) {
      const auto& family = *gauges_[index];
      Header(out, family, "gauge");
      std::lock_guard<std::mutex> family_lock(family.mu_);
      for (const auto& [values, series] : family.series_) {
        out += family.name_ + Labels(family.labels_, values) + " " +
               FormatNumber(series->value()) + "\n";
      }
    } else {
      const auto& family = *histograms_[index];
      Header(out, family, "histogram");
      std::lock_guard<std::mutex> family_lock(family.mu_);
      for (const auto& [values, series] : family.series_) {
        std::lock_guard<std::mutex> series_lock(series->mu_);
        uint64_t cumulative = 0;
        for (size_t b = 0; b <= series->bounds_->size(); ++b) {
          cumulative += series->buckets_[b];
          const std::string le = b < series->bounds_->size()
                                     ? FormatNumber((*series->bounds_)[b])
                                     : "+Inf";
          out += family.name_ + "_bucket" +
                 Labels(family.labels_, values, "le", le) + " " +
                 std::to_string(cumulative) + "\n";
        }
        out += family.name_ + "_sum" + Labels(family.labels_, values) + " " +
               FormatNumber(series->sum_) + "\n";
        out += family.name_ + "_count" + Labels(family.labels_, values) + " " +
               std::to_string(series->count_) + "\n";
      }
    }
  }
  return out;
}

}  // namespace aggregator
