#pragma once
// Where the ranks of one run find each other: a c10d Store behind an opaque
// handle (HashStore for thread ranks, FileStore for process ranks, TCPStore for
// torchrun/Slurm). No fixed ports: files or ephemeral ports only.
#include <chrono>
#include <memory>
#include <string>

namespace parity {

class Rendezvous {
 public:
  struct Store;  // holds a c10::intrusive_ptr<c10d::Store>; see rendezvous_store.h

  // One in-memory store shared by every thread rank of this process.
  static std::shared_ptr<Rendezvous> in_process();
  // A FileStore at `path` (the file is created by the first rank).
  static std::shared_ptr<Rendezvous> file(const std::string& path, int world_size);
  // A TCPStore; rank 0 (is_master) binds host:port, the others connect. A bind or
  // connect failure throws RendezvousError saying which, host and port included.
  static std::shared_ptr<Rendezvous> tcp(const std::string& host, int port, int world_size,
                                         bool is_master, std::chrono::milliseconds timeout);

  explicit Rendezvous(std::unique_ptr<Store> store);
  ~Rendezvous();
  const Store& store() const { return *store_; }

 private:
  std::unique_ptr<Store> store_;
};

}  // namespace parity
