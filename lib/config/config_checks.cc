#include "lib/config/config_checks.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "lib/config/address_clashes.h"
#include "lib/config/typed_readers.h"

namespace aggregator {
namespace {

// Whether `id` is "<name>-<index>" for an index below `replicas`.
bool IsReplicaId(absl::string_view id, absl::string_view name, int replicas) {
  if (!absl::ConsumePrefix(&id, name) || !absl::ConsumePrefix(&id, "-")) {
    return false;
  }
  if (id.empty() || id.size() > 5 || (id.size() > 1 && id[0] == '0') ||
      !std::all_of(id.begin(), id.end(), [](char c) {
        return absl::ascii_isdigit(static_cast<unsigned char>(c));
      })) {
    return false;
  }
  int index = 0;
  return absl::SimpleAtoi(id, &index) && index < replicas;
}

class Checks {
 public:
  Checks(YamlReader* reader, const WrittenFields& written,
         const AggregatorConfig& config)
      : reader_(reader), written_(written), config_(config) {}

  void Run() {
    CheckWorkers();
    CheckAddressClashes();
    if (written_.straggler_shrink &&
        config_.service.on_learner_failure != OnLearnerFailure::kShrink) {
      reader_->Error(*written_.straggler_shrink,
                     "takes a straggler out of the plans as a failure would, "
                     "which needs on_learner_failure: shrink");
    }
    if (written_.min_learners) CheckMinLearners(*written_.min_learners);
    CheckPlaintextListeners();
  }

 private:
  // Ports: {port} needs port_base, ranges within 65535 and not overlapping;
  // learner workers need port_base and replica ids not in `learners`.
  void CheckWorkers() {
    const std::vector<WorkerSpec>& workers = config_.workers;
    for (size_t i = 0; i < workers.size(); ++i) {
      const WorkerSpec& spec = workers[i];
      const WorkerFields& fields = written_.workers[i];
      if (fields.port_use && !fields.port_base_written) {
        reader_->Error(*fields.port_use,
                       absl::StrCat("uses {port}, which needs port_base (the "
                                    "port of replica 0; replica i gets "
                                    "port_base + i)"));
      }
      if (spec.learner && !fields.port_base_written && fields.learner) {
        reader_->Error(*fields.learner,
                       "a learner worker needs port_base: replica i serves on "
                       "127.0.0.1:{port}, where {port} is port_base + i");
      }
      if (fields.port_base && spec.replicas > 0) CheckPorts(i);
      if (spec.learner && fields.name) {
        for (const auto& [id, mark] : written_.learners.ids) {
          if (IsReplicaId(id, spec.name, spec.replicas)) {
            reader_->Error(*fields.name,
                           absl::StrCat("the learner id ", Quote(id),
                                        " of one of its replicas is already "
                                        "the id of a learner in `learners`, "
                                        "at ",
                                        Position(mark)));
          }
        }
      }
    }
  }

  // workers[i]'s ports: within 65535, not overlapping an earlier worker's.
  void CheckPorts(size_t i) {
    const WorkerSpec& spec = config_.workers[i];
    const Field& port_base = *written_.workers[i].port_base;
    const int64_t last = int64_t{spec.port_base} + spec.replicas - 1;
    if (last > kMaxPort) {
      reader_->Error(port_base,
                     absl::StrCat("port_base ", spec.port_base, " with ",
                                  spec.replicas, " replicas needs ports up to ",
                                  last, ", beyond ", kMaxPort));
      return;
    }
    for (size_t j = 0; j < i; ++j) {
      const WorkerSpec& other = config_.workers[j];
      const WorkerFields& other_fields = written_.workers[j];
      if (!other_fields.port_base || other.replicas == 0) continue;
      const int64_t other_last = int64_t{other.port_base} + other.replicas - 1;
      if (other_last > kMaxPort || spec.port_base > other_last ||
          other.port_base > last) {
        continue;
      }
      reader_->Error(
          port_base,
          absl::StrCat("ports ", spec.port_base, "-", last,
                       " overlap the ports of worker ", Quote(other.name), " (",
                       other.port_base, "-", other_last, ", port_base at ",
                       Position(other_fields.port_base->mark), ")"));
    }
  }

  // Where an address user was written (nullopt: it is the default).
  std::optional<Field> FieldOf(const AddressUser& user) const {
    switch (user.kind) {
      case AddressUser::kListen:
        return written_.listen;
      case AddressUser::kMetricsListen:
        return written_.metrics_listen;
      case AddressUser::kAdminListen:
        return written_.admin_listen;
      case AddressUser::kWorker:
        return user.index < written_.workers.size()
                   ? written_.workers[user.index].port_base
                   : std::nullopt;
      case AddressUser::kLearner:
        return user.index < written_.learners.addresses.size()
                   ? written_.learners.addresses[user.index]
                   : std::nullopt;
    }
    return std::nullopt;
  }

  // Reported where the clashing address was written, or, for a default, where
  // the address it clashes with was.
  void CheckAddressClashes() {
    for (const AddressClash& clash : FindAddressClashes(config_)) {
      const std::optional<Field> written = FieldOf(clash.user);
      const std::optional<Field> at = written ? written : FieldOf(clash.other);
      reader_->Error(
          at ? at->mark : YAML::Mark::null_mark(),
          written ? clash.user_key : absl::StrCat(clash.user_key, " (default)"),
          clash.message);
    }
  }

  // Only a written min_learners is checked: the default 1 with no learners
  // listed is kept, since learners may also join later (reload).
  void CheckMinLearners(const Field& field) {
    // Discovered learners are not known in advance.
    if (!config_.learner_sources.empty()) return;
    int64_t worker_learners = 0;
    for (const WorkerSpec& worker : config_.workers) {
      if (worker.learner) worker_learners += worker.replicas;
    }
    const int min_learners = config_.service.min_learners;
    const int64_t learners =
        static_cast<int64_t>(config_.learners.size()) + worker_learners;
    if (min_learners <= learners) return;
    reader_->Error(
        field, worker_learners == 0
                   ? absl::StrCat(min_learners,
                                  " is more than the number of learners "
                                  "listed (",
                                  config_.learners.size(), ")")
                   : absl::StrCat(
                         min_learners, " is more than the number of learners (",
                         config_.learners.size(), " listed + ", worker_learners,
                         " replicas of learner workers)"));
  }

  // Plaintext that other hosts can reach needs saying so.
  void CheckPlaintextListeners() {
    // A tls section with errors of its own is not plaintext asked for.
    if (written_.tls) return;
    auto check = [&](const std::optional<Field>& field,
                     const std::optional<HostPort>& address) {
      if (!field || !address) return;
      if (std::string why = PlaintextRefusal(config_, *address); !why.empty()) {
        reader_->Error(*field, why);
      }
    };
    check(written_.listen, config_.listen);
    check(written_.admin_listen, config_.admin.listen);
  }

  YamlReader* reader_;
  const WrittenFields& written_;
  const AggregatorConfig& config_;
};

}  // namespace

void CheckAcrossSections(YamlReader* reader, const WrittenFields& written,
                         const AggregatorConfig& config) {
  Checks(reader, written, config).Run();
}

}  // namespace aggregator
