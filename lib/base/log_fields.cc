#include "lib/base/log_fields.h"

namespace aggregator {
namespace {

thread_local std::vector<std::pair<const char*, std::string>> log_fields;

}  // namespace

ScopedLogFields::ScopedLogFields(
    std::initializer_list<std::pair<const char*, std::string>> fields)
    : added_(fields.size()) {
  log_fields.insert(log_fields.end(), fields.begin(), fields.end());
}

ScopedLogFields::~ScopedLogFields() {
  log_fields.resize(log_fields.size() - added_);
}

const std::vector<std::pair<const char*, std::string>>& CurrentLogFields() {
  return log_fields;
}

}  // namespace aggregator
