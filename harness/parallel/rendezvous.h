#pragma once
// Where the ranks of one run find each other: a c10d Store behind an opaque
// handle (HashStore for thread ranks, FileStore for process ranks and for one
// node under torchrun, TCPStore for torchrun/Slurm). No fixed ports: files,
// ephemeral ports, or the port torchrun/Slurm names.
#include <chrono>
#include <functional>
#include <memory>
#include <string>

namespace parity {

class Rendezvous {
 public:
  struct Store;  // holds a c10::intrusive_ptr<c10d::Store>; see rendezvous_store.h

  // How long a rank waits in the store for the others (group creation) unless
  // told otherwise; collectives have their own timeout (GroupOptions).
  static constexpr std::chrono::milliseconds kDefaultTimeout{60000};

  // One in-memory store shared by every thread rank of this process.
  static std::shared_ptr<Rendezvous> in_process(
      std::chrono::milliseconds timeout = kDefaultTimeout);
  // A FileStore at `path` (the file is created by the first rank). Throws
  // RendezvousError naming the path when it cannot be opened.
  static std::shared_ptr<Rendezvous> file(const std::string& path, int world_size,
                                          std::chrono::milliseconds timeout = kDefaultTimeout);
  // A TCPStore; rank 0 (is_master) binds host:port, the others connect. A bind or
  // connect failure throws RendezvousError saying which, host and port included.
  // Port 0 on the master binds an ephemeral port: read it back with port().
  // A non-empty `key_prefix` puts every key under it (a PrefixStore): a client
  // of a store that someone else also uses (torchrun's agent) keeps apart.
  static std::shared_ptr<Rendezvous> tcp(const std::string& host, int port, int world_size,
                                         bool is_master, std::chrono::milliseconds timeout,
                                         const std::string& key_prefix = "");

  // A FileStore in `dir` for ranks on one node that have no store server in
  // common but name the same directory, unique to their run (torchrun's run id,
  // its store's port, the restart). The directory is created private (0700); a
  // store file a dead run left there is discarded, never read (a lock file tells
  // a live run's ranks from leftovers); the last rank out removes the directory.
  // Throws RendezvousError naming the path.
  static std::shared_ptr<Rendezvous> node_file(const std::string& dir, int world_size,
                                               std::chrono::milliseconds timeout);

  explicit Rendezvous(std::unique_ptr<Store> store);
  ~Rendezvous();
  const Store& store() const { return *store_; }
  // "in-process HashStore", "FileStore /tmp/x/store", "TCPStore 127.0.0.1:41234 (master)".
  std::string describe() const;
  // The TCPStore's port (the bound one when 0 was asked for); -1 for other stores.
  int port() const;
  // Start-up barrier: announces `rank` under `key` and waits until every rank
  // of `world_size` has, calling `poll` about every 20 ms while it waits (it
  // may throw to give up). Past `limit` it throws RendezvousError naming the
  // ranks that never arrived. Unlike group creation (bounded by the Gloo
  // timeout), it lets ranks whose processes start seconds apart meet.
  void wait_for_every_rank(const std::string& key, int rank, int world_size,
                           std::chrono::milliseconds limit,
                           const std::function<void()>& poll) const;

 private:
  std::unique_ptr<Store> store_;
};

}  // namespace parity
