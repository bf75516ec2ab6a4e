#pragma once
// The communicator of one axis group of one rank, as the model and the metrics
// see it. Mirrors c10d's split: `Communicator` (here, backend-agnostic) does the
// bookkeeping every backend needs (sequence numbers, last-collective status,
// fingerprint checks, empty-group shortcuts), and forwards the data movement to a
// `CollectiveTransport` that a backend implements (reference/: Gloo; cuda/: NCCL).
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "harness/parallel/collective.h"

namespace at {
class Tensor;
}

namespace parity {

class RankStatus;             // harness/parallel/rank_status.h
struct AllToAllResult;        // harness/parallel/all_to_all.h
struct PointToPointOp;        // harness/parallel/point_to_point.h
struct PointToPointTransfer;  // harness/parallel/point_to_point.h

// The messages one rank exchanged with one peer, per direction: counts and the
// sum of each message's pair-fingerprint hash (sender, receiver, channel, pair
// index, message, dtype, shape). Rank a's sends to b and rank b's receives from
// a hash equal iff every message was received as it was sent (the
// collective_symmetry of point-to-point traffic).
struct PointToPointTally {
  int peer = 0;  // group rank
  std::int64_t sends = 0;
  std::uint64_t send_hash = 0xcbf29ce484222325ull;
  std::int64_t recvs = 0;
  std::uint64_t recv_hash = 0xcbf29ce484222325ull;
};

// Data movement only. Tensors are contiguous; results are new tensors unless
// stated. Every call blocks until done or throws (timeout included).
class CollectiveTransport {
 public:
  virtual ~CollectiveTransport() = default;
  virtual int rank() const = 0;  // rank within the group
  virtual int size() const = 0;
  virtual at::Tensor all_reduce(const at::Tensor& input, ReduceOp op) = 0;
  // Equal shapes on every rank; result is the concatenation along `dim`.
  virtual at::Tensor all_gather(const at::Tensor& input, std::int64_t dim) = 0;
  // input.size(dim) divisible by size(); result is this rank's reduced chunk.
  virtual at::Tensor reduce_scatter(const at::Tensor& input, std::int64_t dim, ReduceOp op) = 0;
  virtual at::Tensor broadcast(const at::Tensor& input, int root) = 0;
  virtual void barrier() = 0;
  // Equal chunks: input [size(), ...] on every rank, chunk d for group rank d;
  // the result's chunk s is what rank s sent to this rank. The default
  // (all_to_all.cpp) all-gathers and keeps this rank's chunks, so every
  // transport has it; a transport with a native all-to-all overrides it.
  virtual at::Tensor all_to_all(const at::Tensor& input);
  // Starts every send and receive, then waits for all (receives fill their
  // buffers). The default throws CollectiveError: a transport without
  // point-to-point messages cannot carry a pipeline.
  virtual void exchange(std::vector<PointToPointTransfer>& transfers);
};

struct CommunicatorOptions {
  bool check_collectives = false;  // exchange fingerprints before every collective
};

class Communicator {
 public:
  Communicator(Axis axis, std::vector<int> global_ranks, int rank_in_group,
               std::unique_ptr<CollectiveTransport> transport, RankStatus* status,
               CommunicatorOptions options);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  Axis axis() const { return axis_; }
  int rank() const { return rank_; }
  int size() const { return static_cast<int>(global_ranks_.size()); }
  const std::vector<int>& global_ranks() const { return global_ranks_; }
  std::int64_t calls_issued() const { return sequence_; }
  // FNV-1a 64 chained over the fingerprint (op, reduce op, dtype, shape, dim,
  // sequence, axis) of every call issued so far, from 0xcbf29ce484222325: equal
  // on every rank of a group iff they issued identical sequences (parity
  // check's collective_symmetry). Kept whether or not check_collectives is on.
  std::uint64_t call_hash() const { return call_hash_; }

  at::Tensor all_reduce(const at::Tensor& input, ReduceOp op);
  at::Tensor all_gather(const at::Tensor& input, std::int64_t dim);
  at::Tensor reduce_scatter(const at::Tensor& input, std::int64_t dim, ReduceOp op);
  at::Tensor broadcast(const at::Tensor& input, int root);
  void barrier();
  // The uneven all-to-all (MoE token dispatch): `input` [n, ...] holds, in
  // group-rank order, send_counts[d] rows for each group rank d (sum = n, each
  // >= 0, one count per rank). Returns what every rank sent to this one,
  // concatenated in group-rank order, and those counts. Two calls, each
  // numbered and fingerprinted: all_to_all_counts (int64 [size], gathered) and
  // all_to_all (the chunks padded to the group's largest: [size, max chunk, ...],
  // equal on every rank). Include harness/parallel/all_to_all.h to use it.
  AllToAllResult all_to_all(const at::Tensor& input, const std::vector<std::int64_t>& send_counts);
  // A batch of point-to-point sends and receives with peers of this group,
  // issued together and completed together (no deadlock between two
  // neighbours that both send and receive). Returns the received tensors in
  // the batch's order of receives. Each op is numbered (sequence) and recorded
  // as the last collective; with check_collectives each message's fingerprint
  // (peer, pair index, message, dtype, shape) is compared with the peer's
  // before data moves. Not part of call_hash(): the two sides of a message
  // issue different calls; point_to_point_tallies() pairs them instead.
  // Include harness/parallel/point_to_point.h to use it.
  std::vector<at::Tensor> exchange(const std::vector<PointToPointOp>& batch);
  // One tally per group rank (this rank's own entry stays empty).
  const std::vector<PointToPointTally>& point_to_point_tallies() const { return tallies_; }

  // "tp group [0, 1]" (global ranks), as error messages name the group.
  std::string group_label() const;

 private:
  // Records the call as this rank's last collective and, when checking, compares
  // fingerprints across the group (throws CollectiveMismatch naming both ranks).
  void enter(const CollectiveCall& call);
  void leave();
  // Throws std::invalid_argument naming the call when the arguments are bad
  // (undefined tensor, dim out of range, reduce_scatter size not divisible,
  // broadcast root outside the group). Nothing is sent.
  void check_input(const at::Tensor& input, CollectiveOp op, std::int64_t dim,
                   ReduceOp reduce) const;
  // The same for all_to_all: one count per rank, none negative, summing to the
  // input's rows.
  void check_all_to_all(const at::Tensor& input,
                        const std::vector<std::int64_t>& send_counts) const;
  // Numbers `call` (sets its sequence) and chains it into call_hash().
  void record(CollectiveCall& call);
  // Numbers the call, enters it, moves the data (transfer on the transport, or
  // local() for a group of one), leaves it; rethrows failures with the call.
  template <typename Transfer, typename Local>
  at::Tensor run(CollectiveCall call, Transfer&& transfer, Local&& local);

  Axis axis_;
  std::vector<int> global_ranks_;
  int rank_;
  std::unique_ptr<CollectiveTransport> transport_;  // null when size() == 1
  RankStatus* status_;
  CommunicatorOptions options_;
  // The messages of one batch, checked (peers in range, tensors defined): throws
  // std::invalid_argument naming the op.
  void check_exchange(const std::vector<PointToPointOp>& batch) const;
  std::int64_t sequence_ = 0;
  std::uint64_t call_hash_ = 0xcbf29ce484222325ull;
  std::vector<PointToPointTally> tallies_;  // point_to_point.cpp; empty until the first exchange
  // (peer, channel, sending) -> messages so far: the next message's pair index.
  std::map<std::tuple<int, int, bool>, std::int64_t> pair_index_;
};

}  // namespace parity
