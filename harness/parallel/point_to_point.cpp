// Communicator::exchange and its pair fingerprints (see point_to_point.h).
#include "harness/parallel/point_to_point.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <array>

#include "harness/base/check.h"
#include "harness/parallel/errors.h"
#include "harness/parallel/rank_status.h"

namespace parity {

namespace {

// Tags of the k-th message of an ordered pair on a channel: its data, then
// (checking) the sender's and the receiver's fingerprints of it.
constexpr int kTagsPerMessage = 3;
int tag_base(std::int64_t k, int channel) {
  return static_cast<int>((k * kPointToPointChannels + channel) * kTagsPerMessage);
}
int data_tag(std::int64_t k, int channel) { return tag_base(k, channel); }
int sender_fingerprint_tag(std::int64_t k, int channel) { return tag_base(k, channel) + 1; }
int receiver_fingerprint_tag(std::int64_t k, int channel) { return tag_base(k, channel) + 2; }

// What both sides of one message must agree on, as a fixed number of int64.
constexpr std::int64_t kPairMagic = 0x7061726974790102;  // "parity", pair v2
constexpr int kPairDims = 8;
constexpr int kPairSize = 8 + kPairDims + 1;
using PairFingerprint = std::array<std::int64_t, kPairSize>;

PairFingerprint pair_fingerprint(int sender, int receiver, std::int64_t index,
                                 const PointToPointOp& op) {
  PairFingerprint f{};
  f[0] = kPairMagic;
  f[1] = sender;
  f[2] = receiver;
  f[3] = index;
  f[4] = op.message;
  f[5] = static_cast<std::int64_t>(op.tensor.scalar_type());
  f[6] = op.tensor.dim();
  f[7] = op.channel;
  std::uint64_t tail = 0;
  for (std::int64_t i = 0; i < op.tensor.dim(); ++i) {
    if (i < kPairDims) {
      f[8 + i] = op.tensor.size(i);
    } else {
      tail = (tail ^ static_cast<std::uint64_t>(op.tensor.size(i))) * 1099511628211ull;
    }
  }
  f[8 + kPairDims] = static_cast<std::int64_t>(tail);
  return f;
}

// Adds one message to a tally: the (wrapping) sum of its fingerprint's FNV-1a
// 64 hash. A sum, not a chain: the two sides of a pair may post the channels'
// messages interleaved differently (pp 2 under the interleaved schedule), and
// each fingerprint holds its pair index, so order within a channel still counts.
std::uint64_t chain(std::uint64_t hash, const PairFingerprint& f) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::int64_t v : f)
    for (int b = 0; b < 8; ++b)
      h = (h ^ ((static_cast<std::uint64_t>(v) >> (8 * b)) & 0xffu)) * 1099511628211ull;
  return hash + h;
}

// "message 7, float32 [2, 8, 16], the sender's message #3 to this peer"
std::string describe_pair(const std::int64_t* f) {
  if (f[0] != kPairMagic) return "something that is not a message fingerprint (garbled exchange)";
  CollectiveCall c;
  c.op = CollectiveOp::send;
  c.dtype = static_cast<std::int8_t>(f[5]);
  for (std::int64_t i = 0; i < std::min<std::int64_t>(f[6], kPairDims); ++i)
    c.shape.push_back(f[8 + i]);
  // Reuse the dtype and shape text of a call description:
  // "send(to world rank 0) on world, <dtype> [<shape>], #0".
  std::string text = c.describe();
  const std::size_t comma = text.find(", ", text.find(" on "));
  const std::size_t hash = text.rfind(", #");
  const std::string tensor =
      comma == std::string::npos ? text : text.substr(comma + 2, hash - comma - 2);
  return "message " + std::to_string(f[4]) + ", " + tensor + ", as message #" +
         std::to_string(f[3]) + " on channel " + std::to_string(f[7]) + " from group rank " +
         std::to_string(f[1]) + " to group rank " + std::to_string(f[2]);
}

at::Tensor as_tensor(const PairFingerprint& f) {
  return at::from_blob(const_cast<std::int64_t*>(f.data()), {kPairSize}, at::kLong).clone();
}

std::string message_of(const std::exception& e) {
  if (const auto* c10e = dynamic_cast<const c10::Error*>(&e)) return c10e->what_without_backtrace();
  return e.what();
}

// Each side's fingerprint of every message against the other side's (those
// that arrived): a difference is a CollectiveMismatch naming both ranks.
void compare_fingerprints(const std::vector<PointToPointTransfer>& transfers,
                          const std::vector<PointToPointOp>& batch,
                          const std::vector<PairFingerprint>& mine, const std::string& group,
                          int me, const std::vector<int>& global_ranks) {
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const at::Tensor theirs = transfers[2 * i + 1].tensor.contiguous();
    const std::int64_t* p = theirs.data_ptr<std::int64_t>();
    if (p[0] != kPairMagic) continue;  // not arrived (the peer never posted it)
    if (std::equal(mine[i].begin(), mine[i].end(), p)) continue;
    const bool send = batch[i].direction == PointToPointDirection::send;
    const int peer = global_ranks[static_cast<std::size_t>(batch[i].peer)];
    const std::string my_side =
        describe_pair(mine[i].data()) + (batch[i].label.empty() ? "" : " (" + batch[i].label + ")");
    throw CollectiveMismatch(
        "point-to-point mismatch on " + group + ": rank " + std::to_string(send ? me : peer) +
        " sends " + (send ? my_side : describe_pair(p)) + " but rank " +
        std::to_string(send ? peer : me) + " receives " + (send ? describe_pair(p) : my_side));
  }
}

}  // namespace

PointToPointOp PointToPointOp::send(int peer, at::Tensor data, std::int64_t message,
                                    std::string label, int channel) {
  return {PointToPointDirection::send, peer, std::move(data), message, std::move(label), channel};
}

PointToPointOp PointToPointOp::recv(int peer, at::Tensor like, std::int64_t message,
                                    std::string label, int channel) {
  return {PointToPointDirection::recv, peer, std::move(like), message, std::move(label), channel};
}

void CollectiveTransport::exchange(std::vector<PointToPointTransfer>&) {
  throw CollectiveError("this transport has no point-to-point messages (send/recv)");
}

void Communicator::check_exchange(const std::vector<PointToPointOp>& batch) const {
  for (const PointToPointOp& op : batch) {
    const char* what = op.direction == PointToPointDirection::send ? "send" : "recv";
    auto fail = [&](const std::string& why) {
      PARITY_FAIL(std::string(what) + " (" + op.label + ") on " + group_label() + ": " + why);
    };
    if (op.peer < 0 || op.peer >= size())
      fail("peer " + std::to_string(op.peer) + " is not a rank of a group of " +
           std::to_string(size()));
    if (op.peer == rank_) fail("peer " + std::to_string(op.peer) + " is this rank itself");
    if (!op.tensor.defined()) fail("tensor is undefined");
    if (op.channel < 0 || op.channel >= kPointToPointChannels)
      fail("channel " + std::to_string(op.channel) + " is not in [0, " +
           std::to_string(kPointToPointChannels) + ")");
  }
}

std::vector<at::Tensor> Communicator::exchange(const std::vector<PointToPointOp>& batch) {
  check_exchange(batch);
  if (batch.empty()) return {};
  if (tallies_.empty()) {
    tallies_.resize(static_cast<std::size_t>(size()));
    for (int r = 0; r < size(); ++r) tallies_[static_cast<std::size_t>(r)].peer = r;
  }
  // Number every op, keep its pair index and fingerprint, and describe the batch.
  std::vector<PointToPointTransfer> data;
  std::vector<PairFingerprint> mine;
  std::vector<std::int64_t> index;
  std::string description;
  for (const PointToPointOp& op : batch) {
    const bool send = op.direction == PointToPointDirection::send;
    PointToPointTally& tally = tallies_[static_cast<std::size_t>(op.peer)];
    ++(send ? tally.sends : tally.recvs);
    const std::int64_t k = pair_index_[{op.peer, op.channel, send}]++;
    const PairFingerprint f =
        send ? pair_fingerprint(rank_, op.peer, k, op) : pair_fingerprint(op.peer, rank_, k, op);
    (send ? tally.send_hash : tally.recv_hash) = chain(send ? tally.send_hash : tally.recv_hash, f);
    mine.push_back(f);
    index.push_back(k);
    CollectiveCall call;
    call.op = send ? CollectiveOp::send : CollectiveOp::recv;
    call.axis = axis_;
    call.dtype = static_cast<std::int8_t>(op.tensor.scalar_type());
    call.shape.assign(op.tensor.sizes().begin(), op.tensor.sizes().end());
    call.dim = op.peer;
    call.message = op.message;
    call.label = op.label;
    // Numbered within its pair and channel, not in the group's sequence of
    // collectives: the stages issue different point-to-point calls.
    call.sequence = k;
    description += (description.empty() ? "" : " + ") + call.describe();
    at::Tensor buffer =
        send ? op.tensor.detach().contiguous() : at::empty(op.tensor.sizes(), op.tensor.options());
    data.push_back({op.direction, op.peer, std::move(buffer), data_tag(k, op.channel)});
  }
  // With check_collectives each side also sends its fingerprint of every
  // message and receives the other side's, posted with the data (a batch waits
  // for nothing before it has posted everything, as batch_isend_irecv: waiting
  // for a fingerprint first would wait on a peer's later batch). They are
  // compared before the received data is used, on both sides, which name the
  // same pair.
  std::vector<PointToPointTransfer> transfers;
  if (options_.check_collectives)
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const bool send = batch[i].direction == PointToPointDirection::send;
      const int channel = batch[i].channel;
      const int out = send ? sender_fingerprint_tag(index[i], channel)
                           : receiver_fingerprint_tag(index[i], channel);
      const int in = send ? receiver_fingerprint_tag(index[i], channel)
                          : sender_fingerprint_tag(index[i], channel);
      transfers.push_back({PointToPointDirection::send, batch[i].peer, as_tensor(mine[i]), out});
      transfers.push_back(
          {PointToPointDirection::recv, batch[i].peer, at::zeros({kPairSize}, at::kLong), in});
    }
  const std::size_t first_data = transfers.size();
  for (PointToPointTransfer& t : data) transfers.push_back(std::move(t));
  const int me = global_ranks_[static_cast<std::size_t>(rank_)];
  const std::string context = " (in " + description + ", " + group_label() + ", global rank " +
                              std::to_string(global_ranks_[static_cast<std::size_t>(rank_)]) + ")";
  try {
    if (status_) status_->enter_collective(description);
    at::NoGradGuard no_grad;
    transport_->exchange(transfers);
  } catch (const CollectiveMismatch&) {
    throw;
  } catch (const CollectiveTimeout& e) {
    if (options_.check_collectives)
      compare_fingerprints(transfers, batch, mine, group_label(), me, global_ranks_);
    throw CollectiveTimeout(e.what() + context);
  } catch (const std::exception& e) {
    // A shape mismatch can fail the data transfer itself: the fingerprints
    // that arrived name it.
    if (options_.check_collectives)
      compare_fingerprints(transfers, batch, mine, group_label(), me, global_ranks_);
    throw CollectiveError(message_of(e) + context);
  }
  if (options_.check_collectives)
    compare_fingerprints(transfers, batch, mine, group_label(), me, global_ranks_);
  if (status_) status_->leave_collective();
  std::vector<at::Tensor> received;
  for (std::size_t i = first_data; i < transfers.size(); ++i)
    if (transfers[i].direction == PointToPointDirection::recv)
      received.push_back(std::move(transfers[i].tensor));
  return received;
}

}  // namespace parity
