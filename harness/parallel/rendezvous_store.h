#pragma once
// The definition behind Rendezvous's opaque handle. Costly (c10d headers):
// include it only from .cpp files that need the store (rendezvous.cpp and the
// backends' transports), never from another header.
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "harness/parallel/rendezvous.h"

namespace parity {

struct Rendezvous::Store {
  c10::intrusive_ptr<c10d::Store> store;
  std::string description;  // see Rendezvous::describe()
  int port = -1;            // TCPStore only
  // Runs when the Rendezvous goes, after its reference to `store` is dropped
  // (node_file: release the directory's lock, the last rank removes it).
  std::function<void()> release;

  // A store key prefix for the `group_name` group as seen by `rank`, unique
  // per creation: the n-th creation of a group by a rank gets generation n, so
  // every member of the n-th incarnation agrees on the prefix and a group that
  // is rebuilt on the same store never reads its predecessor's keys. (Thread
  // ranks share this object; a process rank has its own, counting only itself.)
  std::string group_prefix(const std::string& group_name, int rank) const {
    std::lock_guard<std::mutex> lock(mutex_);
    const int generation = generations_[{group_name, rank}]++;
    return group_name + "/g" + std::to_string(generation) + "/";
  }

 private:
  mutable std::mutex mutex_;
  mutable std::map<std::pair<std::string, int>, int> generations_;
};

}  // namespace parity
