// PoolInbox: where LearnerPool's connector thread waits. gRPC's completions
// (connection watches, probes) are put here from gRPC's threads, and the
// connector takes them. Waiting here, not in a gRPC completion queue, keeps the
// connector out of gRPC's pollers: in gRPC 1.51 (epoll1) every thread blocked
// in a completion queue takes turns at polling the whole process's sockets,
// and a third poller beside the callback API's two cost the daemon's calls
// about 4 thread switches each.
//
// It also counts the completions still to come, so that the pool's Stop can
// wait until gRPC has handed back everything it was given.
//
// Thread-safety: all methods may be called from any thread. Put and Wake take
// only the inbox's own lock (a leaf: they may be called under any other lock,
// including from inside a gRPC call made under the pool's lock).
#ifndef LIB_LEARNERS_POOL_INBOX_H_
#define LIB_LEARNERS_POOL_INBOX_H_

#include <cstddef>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "lib/base/mutex.h"

namespace aggregator {

class PoolInbox {
 public:
  struct Item {
    void* tag;
    bool ok;
  };

  // One more completion will be Put.
  void Expect() {
    MutexLock lock(&mu_);
    ++expected_;
  }
  // A completion. Touches nothing of the inbox's once its lock is released,
  // so the inbox may be destroyed as soon as the waiter has taken the item.
  void Put(void* tag, bool ok) {
    MutexLock lock(&mu_);
    items_.push_back(Item{tag, ok});
  }
  // Wakes the waiter without an item (the clock moved, new learners).
  void Wake() {
    MutexLock lock(&mu_);
    woken_ = true;
  }
  // Waits until there is an item or a Wake, or `timeout` has passed; returns
  // the items taken (none on a Wake or a timeout).
  std::vector<Item> Wait(absl::Duration timeout) {
    MutexLock lock(&mu_);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return woken_ || !items_.empty();
    };
    mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
    woken_ = false;
    std::vector<Item> taken;
    taken.swap(items_);
    expected_ -= taken.size();
    return taken;
  }
  // No completion is still to come or left to take.
  bool Drained() const {
    MutexLock lock(&mu_);
    return expected_ == 0;
  }

 private:
  mutable Mutex mu_;
  std::vector<Item> items_ ABSL_GUARDED_BY(mu_);
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
  size_t expected_ ABSL_GUARDED_BY(mu_) = 0;  // Expect()ed, not yet taken
};

}  // namespace aggregator

#endif  // LIB_LEARNERS_POOL_INBOX_H_
