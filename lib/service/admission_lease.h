// Admission of the service's incoming calls, as one lease per call.
//
// Admission lets a call in or refuses it: FAILED_PRECONDITION when it loops
// back through this aggregator or has passed through too many
// (lib/learners/call_path.h), UNAVAILABLE once draining; a refusal is
// recorded in the served metrics at once. A call let in holds an
// AdmissionLease until it is over. The lease is everything the call takes:
// its place among the calls in flight (which WaitIdle waits for), the bytes
// of its batch counted against max_inflight_bytes (InflightBudget), and its
// record in the served metrics. Its destructor gives back whatever is still
// held, so no return path can keep a slot: a lease dropped without Finish
// (a bug) still counts its call out, frees its bytes, records the call as
// INTERNAL and, for a unary call, answers it.
//
// Thread-safety: Admission's methods may be called from any thread. A lease
// is used by one thread at a time (the call's), and may end on any thread.
// Once its call is answered (Finish, Served) a lease may outlive its
// Admission: gRPC may end an answered call at once, Server::Wait return and
// the service go while the answering thread is still on its way out, so what
// a lease does after the answer (counting its call out) touches only state it
// shares with the Admission.
#ifndef LIB_SERVICE_ADMISSION_LEASE_H_
#define LIB_SERVICE_ADMISSION_LEASE_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "lib/base/clock.h"
#include "lib/base/mutex.h"
#include "lib/ops/aggregator_metrics.h"
#include "lib/service/inflight_budget.h"

namespace aggregator {

class Admission;

namespace admission_internal {

// The calls in flight: the Admission's, shared with its leases (see above).
struct InFlight {
  Mutex mu;
  bool draining ABSL_GUARDED_BY(mu) = false;
  int64_t count ABSL_GUARDED_BY(mu) = 0;
};

}  // namespace admission_internal

class AdmissionLease {
 public:
  ~AdmissionLease();
  AdmissionLease(const AdmissionLease&) = delete;
  AdmissionLease& operator=(const AdmissionLease&) = delete;

  const char* method() const { return method_; }
  // When the call was let in (on the Admission's clock): what the served
  // metrics time it from.
  Clock::TimePoint started() const { return started_; }
  // What the call's calls to learners carry (lib/learners/call_path.h).
  const std::string& call_path() const { return call_path_; }

  // `bytes` more of max_inflight_bytes for the call's batch, if the total
  // stays within `limit`: RESOURCE_EXHAUSTED naming the figures otherwise. A
  // stream's messages grow the one lease.
  absl::Status Reserve(int64_t bytes, int64_t limit);
  int64_t reserved_bytes() const;
  // Gives the bytes back now: before the caller hears back, so that a caller
  // that sends its next batch at once finds them.
  void FreeBytes();

  // Records the call's outcome in the served metrics and frees its bytes;
  // the first outcome counts. For a call that answers its caller itself (a
  // stream); the lease's end then counts it out.
  void Served(const grpc::Status& status);
  // The end of a unary call: Served, the caller answered through `reactor`,
  // and the call counted out.
  void Finish(grpc::ServerUnaryReactor* reactor, const grpc::Status& status);

 private:
  friend class Admission;
  AdmissionLease(Admission* admission,
                 std::shared_ptr<admission_internal::InFlight> in_flight,
                 const char* method, std::string call_path);
  // The call no longer counts among those in flight; once. Safe after the
  // Admission is gone.
  void CountOut();

  Admission* const admission_;  // until the call is answered
  const std::shared_ptr<admission_internal::InFlight> in_flight_;
  const char* const method_;
  const Clock::TimePoint started_;
  const std::string call_path_;
  // A unary call's, answered by the destructor if nothing else did.
  grpc::ServerUnaryReactor* reactor_ = nullptr;
  std::unique_ptr<InflightBudget::Lease> bytes_;
  bool served_ = false;
  bool counted_in_ = true;
};

class Admission {
 public:
  // `aggregator_id` names this aggregator on the calls it relays (empty: no
  // loop protection); `metrics` is optional and must outlive this; calls are
  // timed on `clock` (null: SteadyClock(); must outlive this).
  Admission(std::string aggregator_id, AggregatorMetrics* metrics,
            Clock* clock = nullptr);

  // Lets a call of `method` in: a lease, or null with `*refused` saying why
  // (recorded in the served metrics). With an aggregator id, `context`'s
  // initial metadata names this aggregator to the caller.
  std::unique_ptr<AdmissionLease> Admit(grpc::ServerContextBase* context,
                                        const char* method,
                                        grpc::Status* refused);
  // Admit for a unary call: a refusal finishes `reactor` with it.
  std::unique_ptr<AdmissionLease> AdmitUnary(grpc::ServerContextBase* context,
                                             grpc::ServerUnaryReactor* reactor,
                                             const char* method);

  // A lease for work the service starts itself, on no caller's behalf (the
  // rejoin step's replays): counted in flight so WaitIdle waits for it, never
  // recorded as served; null once draining.
  std::unique_ptr<AdmissionLease> Hold();
  const std::string& aggregator_id() const { return aggregator_id_; }

  // From now on calls are refused with UNAVAILABLE; leases held go on.
  void StartDraining();
  // Waits until no lease is held or the deadline passes; true when none is.
  bool WaitIdle(std::chrono::steady_clock::time_point deadline);
  // Leases held now.
  int64_t in_flight() const;
  // Bytes reserved by the leases now.
  int64_t inflight_bytes() const { return budget_.in_flight(); }

 private:
  friend class AdmissionLease;
  void Record(const char* method, const grpc::Status& status,
              double seconds) const;
  // A lease of `method`, counted in; null once draining.
  std::unique_ptr<AdmissionLease> CountIn(const char* method,
                                          std::string call_path);

  const std::string aggregator_id_;
  AggregatorMetrics* const metrics_;
  Clock& clock_;
  InflightBudget budget_;
  const std::shared_ptr<admission_internal::InFlight> in_flight_ =
      std::make_shared<admission_internal::InFlight>();
};

}  // namespace aggregator

#endif  // LIB_SERVICE_ADMISSION_LEASE_H_
