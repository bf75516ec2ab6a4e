#include "harness/parallel/communicator.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // at::NoGradGuard (not pulled in by ATen.h in 2.x)

#include <array>
#include <sstream>

#include "harness/base/check.h"
#include "harness/faults/code_path_faults.h"
#include "harness/parallel/all_to_all.h"
#include "harness/parallel/errors.h"
#include "harness/parallel/rank_status.h"

PARITY_USES_FAULT(asymmetric_collective);

namespace parity {

namespace {

// Fingerprint of one call: a fixed number of int64 so the exchange (an
// all_gather of this many values on every rank) can never itself mismatch.
constexpr std::int64_t kFingerprintMagic = 0x7061726974790001;  // "parity", v1
constexpr int kFingerprintDims = 15;
constexpr int kFingerprintSize = 8 + kFingerprintDims + 1;
using Fingerprint = std::array<std::int64_t, kFingerprintSize>;

Fingerprint fingerprint(const CollectiveCall& c) {
  Fingerprint f{};
  f[0] = kFingerprintMagic;
  f[1] = static_cast<std::int64_t>(c.op);
  f[2] = static_cast<std::int64_t>(c.reduce);
  f[3] = c.dtype;
  f[4] = static_cast<std::int64_t>(c.shape.size());
  f[5] = c.dim;
  f[6] = c.sequence;
  f[7] = static_cast<std::int64_t>(c.axis);
  std::uint64_t tail = 0;  // dims beyond kFingerprintDims, hashed (FNV-1a style)
  for (std::size_t i = 0; i < c.shape.size(); ++i) {
    if (i < kFingerprintDims) {
      f[8 + i] = c.shape[i];
    } else {
      tail = (tail ^ static_cast<std::uint64_t>(c.shape[i])) * 1099511628211ull;
    }
  }
  f[8 + kFingerprintDims] = static_cast<std::int64_t>(tail);
  return f;
}

// The call a fingerprint describes (dims past kFingerprintDims are not kept).
CollectiveCall decode(const std::int64_t* f) {
  CollectiveCall c;
  if (f[0] != kFingerprintMagic) {
    c.op = CollectiveOp::barrier;
    c.sequence = -1;
    return c;
  }
  c.op = static_cast<CollectiveOp>(f[1]);
  c.reduce = static_cast<ReduceOp>(f[2]);
  c.dtype = static_cast<std::int8_t>(f[3]);
  c.dim = f[5];
  c.sequence = f[6];
  c.axis = static_cast<Axis>(f[7]);
  const std::int64_t ndim = std::min<std::int64_t>(f[4], kFingerprintDims);
  for (std::int64_t i = 0; i < ndim; ++i) c.shape.push_back(f[8 + i]);
  return c;
}

std::string describe_fingerprint(const std::int64_t* f) {
  if (f[0] != kFingerprintMagic) return "something that is not a fingerprint (garbled exchange)";
  CollectiveCall c = decode(f);
  std::string s = c.describe();
  if (f[4] > kFingerprintDims)
    s += " (" + std::to_string(f[4]) + " dims, first " + std::to_string(kFingerprintDims) +
         " shown)";
  return s;
}

std::string ranks_to_string(const std::vector<int>& ranks) {
  std::string s = "[";
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(ranks[i]);
  }
  return s + "]";
}

CollectiveCall make_call(CollectiveOp op, Axis axis, const at::Tensor& t, ReduceOp reduce,
                         std::int64_t dim) {
  CollectiveCall c;
  c.op = op;
  c.axis = axis;
  c.reduce = reduce;
  c.dim = dim;
  if (t.defined()) {
    c.dtype = static_cast<std::int8_t>(t.scalar_type());
    c.shape.assign(t.sizes().begin(), t.sizes().end());
  }
  return c;
}

std::string message_of(const std::exception& e) {
  if (const auto* c10e = dynamic_cast<const c10::Error*>(&e)) return c10e->what_without_backtrace();
  return e.what();
}

}  // namespace

Communicator::Communicator(Axis axis, std::vector<int> global_ranks, int rank_in_group,
                           std::unique_ptr<CollectiveTransport> transport, RankStatus* status,
                           CommunicatorOptions options)
    : axis_(axis),
      global_ranks_(std::move(global_ranks)),
      rank_(rank_in_group),
      transport_(std::move(transport)),
      status_(status),
      options_(options) {
  if (global_ranks_.empty()) PARITY_FAIL("communicator: empty group");
  if (rank_ < 0 || rank_ >= size())
    PARITY_FAIL("communicator: rank " + std::to_string(rank_) + " outside a group of " +
                std::to_string(size()));
  if (size() > 1 && !transport_)
    PARITY_FAIL("communicator: a group of " + std::to_string(size()) + " ranks needs a transport");
  if (transport_ && (transport_->size() != size() || transport_->rank() != rank_))
    PARITY_FAIL("communicator: transport is rank " + std::to_string(transport_->rank()) + " of " +
                std::to_string(transport_->size()) + ", expected rank " + std::to_string(rank_) +
                " of " + std::to_string(size()));
}

Communicator::~Communicator() = default;

std::string Communicator::group_label() const {
  return std::string(to_string(axis_)) + " group " + ranks_to_string(global_ranks_);
}

void Communicator::enter(const CollectiveCall& call) {
  if (status_) status_->enter_collective(call);
  if (!options_.check_collectives || size() == 1) return;

  const Fingerprint mine = fingerprint(call);
  at::Tensor local =
      at::from_blob(const_cast<std::int64_t*>(mine.data()), {kFingerprintSize}, at::kLong).clone();
  at::Tensor all = transport_->all_gather(local, 0).contiguous();
  if (all.numel() != static_cast<std::int64_t>(kFingerprintSize) * size())
    throw CollectiveMismatch("collective fingerprint exchange on " + group_label() + " returned " +
                             std::to_string(all.numel()) + " values");
  const std::int64_t* p = all.data_ptr<std::int64_t>();
  // Every rank compares against group rank 0 and names the first rank that
  // differs, so all ranks of the group report the same pair.
  for (int r = 1; r < size(); ++r) {
    const std::int64_t* other = p + static_cast<std::ptrdiff_t>(r) * kFingerprintSize;
    if (!std::equal(p, p + kFingerprintSize, other)) {
      throw CollectiveMismatch(
          "collective mismatch on " + group_label() + ": rank " + std::to_string(global_ranks_[0]) +
          " called " + describe_fingerprint(p) + " but rank " + std::to_string(global_ranks_[r]) +
          " called " + describe_fingerprint(other));
    }
  }
}

void Communicator::leave() {
  if (status_) status_->leave_collective();
}

void Communicator::record(CollectiveCall& call) {
  call.sequence = sequence_++;
  for (std::int64_t v : fingerprint(call))
    for (int b = 0; b < 8; ++b)
      call_hash_ =
          (call_hash_ ^ ((static_cast<std::uint64_t>(v) >> (8 * b)) & 0xffu)) * 1099511628211ull;
}

template <typename Transfer, typename Local>
at::Tensor Communicator::run(CollectiveCall call, Transfer&& transfer, Local&& local) {
  // Fault asymmetric-collective: the group's last rank issues a barrier its peers do not
  // (recorded only, no data moves: the request sequences differ without a hang).
  if (fault_active(fault_asymmetric_collective) && size() > 1 && rank_ == size() - 1 &&
      sequence_ == 0) {
    CollectiveCall extra = make_call(CollectiveOp::barrier, axis_, at::Tensor(), ReduceOp::sum, 0);
    record(extra);
  }
  record(call);
  auto context = [&] {
    return " (in " + call.describe() + ", " + group_label() + ", global rank " +
           std::to_string(global_ranks_[rank_]) + ")";
  };
  at::Tensor result;
  try {
    enter(call);
    at::NoGradGuard no_grad;
    result = size() == 1 ? local() : transfer(*transport_);
  } catch (const CollectiveMismatch&) {
    throw;
  } catch (const CollectiveTimeout& e) {
    throw CollectiveTimeout(e.what() + context());
  } catch (const std::exception& e) {
    throw CollectiveError(message_of(e) + context());
  }
  leave();
  return result;
}

void Communicator::check_input(const at::Tensor& input, CollectiveOp op, std::int64_t dim,
                               ReduceOp reduce) const {
  CollectiveCall c = make_call(op, axis_, input, reduce, dim);
  c.sequence = sequence_;
  auto fail = [&](const std::string& why) {
    PARITY_FAIL(c.describe() + " on " + group_label() + ": " + why);
  };
  if (!input.defined()) fail("input tensor is undefined");
  if (op == CollectiveOp::all_gather || op == CollectiveOp::reduce_scatter) {
    if (input.dim() == 0) fail("needs a tensor with at least one dimension");
    if (dim < -input.dim() || dim >= input.dim())
      fail("dim " + std::to_string(dim) + " is out of range for " + std::to_string(input.dim()) +
           " dimensions");
  }
  if (op == CollectiveOp::reduce_scatter) {
    const std::int64_t wrapped = dim < 0 ? dim + input.dim() : dim;
    if (input.size(wrapped) % size() != 0)
      fail("size " + std::to_string(input.size(wrapped)) + " of dim " + std::to_string(wrapped) +
           " is not divisible by the group size " + std::to_string(size()));
  }
  if (op == CollectiveOp::broadcast && (dim < 0 || dim >= size()))
    fail("root " + std::to_string(dim) + " is not a rank of a group of " + std::to_string(size()));
}

at::Tensor Communicator::all_reduce(const at::Tensor& input, ReduceOp op) {
  check_input(input, CollectiveOp::all_reduce, 0, op);
  const at::Tensor x = input.detach().contiguous();
  return run(
      make_call(CollectiveOp::all_reduce, axis_, x, op, 0),
      [&](CollectiveTransport& t) { return t.all_reduce(x, op); }, [&] { return x.clone(); });
}

at::Tensor Communicator::all_gather(const at::Tensor& input, std::int64_t dim) {
  check_input(input, CollectiveOp::all_gather, dim, ReduceOp::sum);
  const at::Tensor x = input.detach().contiguous();
  if (dim < 0) dim += x.dim();
  return run(
      make_call(CollectiveOp::all_gather, axis_, x, ReduceOp::sum, dim),
      [&](CollectiveTransport& t) { return t.all_gather(x, dim); }, [&] { return x.clone(); });
}

at::Tensor Communicator::reduce_scatter(const at::Tensor& input, std::int64_t dim, ReduceOp op) {
  check_input(input, CollectiveOp::reduce_scatter, dim, op);
  const at::Tensor x = input.detach().contiguous();
  if (dim < 0) dim += x.dim();
  return run(
      make_call(CollectiveOp::reduce_scatter, axis_, x, op, dim),
      [&](CollectiveTransport& t) { return t.reduce_scatter(x, dim, op); },
      [&] { return x.clone(); });
}

at::Tensor Communicator::broadcast(const at::Tensor& input, int root) {
  check_input(input, CollectiveOp::broadcast, root, ReduceOp::sum);
  const at::Tensor x = input.detach().contiguous();
  return run(
      make_call(CollectiveOp::broadcast, axis_, x, ReduceOp::sum, root),
      [&](CollectiveTransport& t) { return t.broadcast(x, root); }, [&] { return x.clone(); });
}

void Communicator::check_all_to_all(const at::Tensor& input,
                                    const std::vector<std::int64_t>& send_counts) const {
  CollectiveCall c = make_call(CollectiveOp::all_to_all, axis_, input, ReduceOp::sum, 0);
  c.sequence = sequence_;
  auto fail = [&](const std::string& why) {
    PARITY_FAIL(c.describe() + " on " + group_label() + ": " + why);
  };
  if (!input.defined()) fail("input tensor is undefined");
  if (input.dim() == 0) fail("needs a tensor with at least one dimension (rows)");
  if (static_cast<int>(send_counts.size()) != size())
    fail(std::to_string(send_counts.size()) + " send counts for a group of " +
         std::to_string(size()) + " (one per rank)");
  std::int64_t total = 0;
  for (std::size_t d = 0; d < send_counts.size(); ++d) {
    if (send_counts[d] < 0)
      fail("send count " + std::to_string(send_counts[d]) + " for rank " + std::to_string(d) +
           " is negative");
    total += send_counts[d];
  }
  if (total != input.size(0))
    fail("send counts sum to " + std::to_string(total) + " but the input has " +
         std::to_string(input.size(0)) + " rows");
}

AllToAllResult Communicator::all_to_all(const at::Tensor& input,
                                        const std::vector<std::int64_t>& send_counts) {
  check_all_to_all(input, send_counts);
  const at::Tensor x = input.detach().contiguous();
  // 1. Every rank learns every rank's counts: the same int64 [size] on every rank.
  const at::Tensor mine =
      at::tensor(at::ArrayRef<std::int64_t>(send_counts), at::TensorOptions().dtype(at::kLong));
  const at::Tensor gathered = run(
      make_call(CollectiveOp::all_to_all_counts, axis_, mine, ReduceOp::sum, 0),
      [&](CollectiveTransport& t) { return t.all_gather(mine, 0); }, [&] { return mine.clone(); });
  const AllToAllCounts counts(size(), gathered);
  std::vector<std::int64_t> recv_counts = counts.received_by(rank_);
  // 2. The data, each chunk padded to the largest: [size, max chunk, ...] on every
  // rank, so the call and its fingerprint are symmetric. When every chunk is
  // empty (known to all alike) nothing needs to travel.
  const std::int64_t max_chunk = counts.max_chunk();
  const at::Tensor padded = pad_chunks(x, send_counts, max_chunk);
  const at::Tensor received = run(
      make_call(CollectiveOp::all_to_all, axis_, padded, ReduceOp::sum, 0),
      [&](CollectiveTransport& t) {
        return max_chunk == 0 ? padded.clone() : t.all_to_all(padded);
      },
      [&] { return padded.clone(); });
  return {unpad_chunks(received, recv_counts), std::move(recv_counts)};
}

void Communicator::barrier() {
  run(
      make_call(CollectiveOp::barrier, axis_, at::Tensor(), ReduceOp::sum, 0),
      [&](CollectiveTransport& t) {
        t.barrier();
        return at::Tensor();
      },
      [&] { return at::Tensor(); });
}

}  // namespace parity
