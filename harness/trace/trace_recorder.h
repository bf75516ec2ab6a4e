#pragma once
// The observation trace: an observer that turns every notification into a small
// record at once (labels, shape, dtype, grad mode, thread, a content digest and
// summary statistics) and keeps no reference to the tensor, which may be a
// static graph buffer that the next replay overwrites (contract.md section 3).
// `parity run --trace FILE` writes the records of every rank as JSONL; the
// format is docs/trace-format.md.
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <nlohmann/json_fwd.hpp>

#include "harness/backend/backend.h"  // GraphPhase
#include "harness/observation/tensor_observation.h"

namespace parity {

// The five first-wave kinds (contract.md section 2): what a trace records by default.
KindSet first_wave_kinds();

// "eager", "record", "warmup", "capture", "replay".
std::string_view graph_phase_name(GraphPhase phase);
std::optional<GraphPhase> graph_phase_from_string(std::string_view name);

// FNV-1a 64 over the bytes of a contiguous CPU copy of `tensor` in its own
// dtype (little-endian, row-major), so two tensors digest equal iff their
// dtypes, element counts and bytes are equal. (Shape is recorded separately.)
std::uint64_t tensor_digest(const at::Tensor& tensor);
// "float32", "float64", "bfloat16", "float16", "int64", ... (torch's spelling).
std::string dtype_name(at::ScalarType type);
// "0x" + 16 lower-case hex digits.
std::string digest_hex(std::uint64_t digest);

// Summary statistics in fp64 over the FINITE elements (so the record stays
// valid JSON whatever the contents); NaN and +-Inf are counted apart.
struct TensorSummary {
  std::int64_t numel = 0;
  double sum = 0;
  double sum_sq = 0;
  std::optional<double> min, max;  // nullopt when no element is finite
  std::int64_t nan = 0;
  std::int64_t inf = 0;
};
TensorSummary summarize(const at::Tensor& tensor);

struct TraceRecord {
  int rank = 0;
  std::int64_t seq = 0;    // per-rank notification order, from 0
  std::int64_t step = -1;  // ExecutionPoint at notification time
  std::int64_t microbatch = -1;
  GraphPhase phase = GraphPhase::eager;
  std::string site;  // owner canonical name + "." + local name
  SourceKind kind = SourceKind::residual_accumulator;
  OptionalDim tp_shard_dim, sequence_dim, batch_dim;
  std::vector<std::int64_t> shape;
  std::string dtype;           // "float32", "float64", "bfloat16", ...
  bool grad_mode = false;      // at::GradMode::is_enabled() at notification
  bool requires_grad = false;  // the tensor's flag
  // residual_contribution only: the tensor shares storage with the same
  // layer's residual_accumulator observed just before it on this thread
  // (contract.md section 1 wants a fresh tensor). False for other kinds.
  bool aliases_accumulator = false;
  int thread = 0;  // small per-rank index: 0 = first thread seen
  std::uint64_t digest = 0;
  TensorSummary summary;
};

// One JSON object, keys in the documented order (docs/trace-format.md).
nlohmann::ordered_json to_json(const TraceRecord& record);
TraceRecord trace_record_from_json(const nlohmann::json& j);
// The JSONL text of `records`, sorted by (rank, seq): one line each, "\n"-ended.
std::string to_jsonl(std::vector<TraceRecord> records);

// The recorder of one rank. Thread-safe (a rank's notifications may come from
// several threads; each gets a stable small index in order of first appearance).
class TraceRecorder {
 public:
  explicit TraceRecorder(int rank) : rank_(rank) {}
  TraceRecorder(const TraceRecorder&) = delete;
  TraceRecorder& operator=(const TraceRecorder&) = delete;

  // The observation callback (captures `this`: the recorder must outlive the scope).
  TensorObservationCallback callback();
  void record(const ObservationOwner& owner, std::string_view name, SourceKind kind,
              const at::Tensor& tensor, OptionalDim tp_shard_dim, OptionalDim sequence_dim,
              OptionalDim batch_dim);

  // Opt-in (parity run --dump): from now on, also keep a copy of the tensor of
  // every record for which `keep` holds (it sees the record without its seq and
  // thread). The copy is detached, on the CPU, contiguous and the recorder's own
  // (a clone, never a view of a buffer the model may overwrite); its bytes are
  // the ones the record's digest was computed on. Call it before the first
  // notification. Undefined tensors are never kept.
  void keep_values(std::function<bool(const TraceRecord&)> keep);
  // seq -> the kept copy, in seq order.
  std::map<std::int64_t, at::Tensor> kept_values() const;

  int rank() const { return rank_; }
  std::vector<TraceRecord> records() const;
  std::int64_t size() const;
  // Notifications per kind name (only kinds seen).
  std::map<std::string, std::int64_t> counts() const;

 private:
  int thread_index_locked(std::thread::id id);

  // Per thread index: the storage byte range of the last notification, when it
  // was a residual_accumulator (an address range, not a reference: the
  // recorder keeps nothing of the tensor alive).
  struct LastAccumulator {
    std::string owner;
    std::uintptr_t begin = 0, end = 0;
    bool valid = false;
  };

  int rank_;
  std::vector<LastAccumulator> last_accumulator_;  // by thread index
  mutable std::mutex mutex_;
  std::vector<TraceRecord> records_;
  std::vector<std::thread::id> threads_;
  std::function<bool(const TraceRecord&)> keep_;  // set by keep_values before recording
  std::map<std::int64_t, at::Tensor> kept_;       // by seq
};

}  // namespace parity
