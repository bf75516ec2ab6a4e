#include "harness/trace/trace_recorder.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "harness/backend/stable_hash.h"
#include "harness/base/check.h"
#include "harness/observation/execution_point.h"

namespace parity {

KindSet first_wave_kinds() {
  return KindSet{SourceKind::residual_accumulator, SourceKind::residual_contribution,
                 SourceKind::output_logits,        SourceKind::attention_context,
                 SourceKind::mlp_output,           SourceKind::layernorm_output};
}

namespace {
constexpr std::pair<GraphPhase, std::string_view> kPhases[] = {{GraphPhase::eager, "eager"},
                                                               {GraphPhase::record, "record"},
                                                               {GraphPhase::warmup, "warmup"},
                                                               {GraphPhase::capture, "capture"},
                                                               {GraphPhase::replay, "replay"}};
}  // namespace

std::string_view graph_phase_name(GraphPhase phase) {
  for (const auto& [p, n] : kPhases)
    if (p == phase) return n;
  return "?";
}

std::optional<GraphPhase> graph_phase_from_string(std::string_view name) {
  for (const auto& [p, n] : kPhases)
    if (n == name) return p;
  return std::nullopt;
}

std::uint64_t tensor_digest(const at::Tensor& tensor) {
  const at::Tensor t = tensor.detach().to(at::kCPU).contiguous();
  const auto* bytes = static_cast<const char*>(t.data_ptr());
  return fnv1a64(std::string_view(bytes, static_cast<std::size_t>(t.numel() * t.element_size())));
}

std::string dtype_name(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return "float32";
    case at::kDouble:
      return "float64";
    case at::kBFloat16:
      return "bfloat16";
    case at::kHalf:
      return "float16";
    case at::kLong:
      return "int64";
    case at::kInt:
      return "int32";
    case at::kBool:
      return "bool";
    default:
      return c10::toString(type);
  }
}

std::string digest_hex(std::uint64_t digest) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(digest));
  return buf;
}

TensorSummary summarize(const at::Tensor& tensor) {
  TensorSummary s;
  const at::Tensor t = tensor.detach().to(at::kCPU, at::kDouble).contiguous();
  s.numel = t.numel();
  const double* p = t.data_ptr<double>();
  double lo = 0, hi = 0;
  bool any = false;
  for (std::int64_t i = 0; i < s.numel; ++i) {
    const double v = p[i];
    if (std::isnan(v)) {
      ++s.nan;
    } else if (std::isinf(v)) {
      ++s.inf;
    } else {
      s.sum += v;
      s.sum_sq += v * v;
      lo = any ? std::min(lo, v) : v;
      hi = any ? std::max(hi, v) : v;
      any = true;
    }
  }
  if (any) {
    s.min = lo;
    s.max = hi;
  }
  return s;
}

namespace {
nlohmann::ordered_json dim_json(const OptionalDim& d) {
  return d ? nlohmann::ordered_json(*d) : nlohmann::ordered_json(nullptr);
}
OptionalDim dim_from(const nlohmann::json& j) {
  return j.is_null() ? OptionalDim{} : OptionalDim{j.get<std::int64_t>()};
}
std::optional<double> opt_double(const nlohmann::json& j) {
  return j.is_null() ? std::optional<double>{} : std::optional<double>{j.get<double>()};
}
}  // namespace

nlohmann::ordered_json to_json(const TraceRecord& r) {
  nlohmann::ordered_json j;
  j["rank"] = r.rank;
  j["seq"] = r.seq;
  j["step"] = r.step;
  j["microbatch"] = r.microbatch;
  j["phase"] = graph_phase_name(r.phase);
  j["site"] = r.site;
  j["kind"] = to_string(r.kind);
  j["tp_shard_dim"] = dim_json(r.tp_shard_dim);
  j["sequence_dim"] = dim_json(r.sequence_dim);
  j["batch_dim"] = dim_json(r.batch_dim);
  j["shape"] = r.shape;
  j["dtype"] = r.dtype;
  j["grad_mode"] = r.grad_mode;
  j["requires_grad"] = r.requires_grad;
  j["aliases_accumulator"] = r.aliases_accumulator;
  j["thread"] = r.thread;
  j["digest"] = digest_hex(r.digest);
  j["numel"] = r.summary.numel;
  j["sum"] = r.summary.sum;
  j["sum_sq"] = r.summary.sum_sq;
  j["min"] =
      r.summary.min ? nlohmann::ordered_json(*r.summary.min) : nlohmann::ordered_json(nullptr);
  j["max"] =
      r.summary.max ? nlohmann::ordered_json(*r.summary.max) : nlohmann::ordered_json(nullptr);
  j["nan"] = r.summary.nan;
  j["inf"] = r.summary.inf;
  return j;
}

TraceRecord trace_record_from_json(const nlohmann::json& j) {
  TraceRecord r;
  r.rank = j.at("rank").get<int>();
  r.seq = j.at("seq").get<std::int64_t>();
  r.step = j.at("step").get<std::int64_t>();
  r.microbatch = j.at("microbatch").get<std::int64_t>();
  const std::string phase = j.at("phase").get<std::string>();
  const std::optional<GraphPhase> p = graph_phase_from_string(phase);
  PARITY_CHECK(p, "trace record: unknown phase \"" + phase + "\"");
  r.phase = *p;
  r.site = j.at("site").get<std::string>();
  const std::string kind = j.at("kind").get<std::string>();
  const std::optional<SourceKind> k = source_kind_from_string(kind);
  PARITY_CHECK(k, "trace record: unknown kind \"" + kind + "\"");
  r.kind = *k;
  r.tp_shard_dim = dim_from(j.at("tp_shard_dim"));
  r.sequence_dim = dim_from(j.at("sequence_dim"));
  r.batch_dim = dim_from(j.at("batch_dim"));
  r.shape = j.at("shape").get<std::vector<std::int64_t>>();
  r.dtype = j.at("dtype").get<std::string>();
  r.grad_mode = j.at("grad_mode").get<bool>();
  r.requires_grad = j.at("requires_grad").get<bool>();
  r.aliases_accumulator = j.value("aliases_accumulator", false);  // absent in older traces
  r.thread = j.at("thread").get<int>();
  r.digest = std::stoull(j.at("digest").get<std::string>(), nullptr, 16);
  r.summary.numel = j.at("numel").get<std::int64_t>();
  r.summary.sum = j.at("sum").get<double>();
  r.summary.sum_sq = j.at("sum_sq").get<double>();
  r.summary.min = opt_double(j.at("min"));
  r.summary.max = opt_double(j.at("max"));
  r.summary.nan = j.at("nan").get<std::int64_t>();
  r.summary.inf = j.at("inf").get<std::int64_t>();
  return r;
}

std::string to_jsonl(std::vector<TraceRecord> records) {
  std::stable_sort(records.begin(), records.end(), [](const TraceRecord& a, const TraceRecord& b) {
    return a.rank != b.rank ? a.rank < b.rank : a.seq < b.seq;
  });
  std::string out;
  for (const TraceRecord& r : records) {
    out += to_json(r).dump();
    out += '\n';
  }
  return out;
}

TensorObservationCallback TraceRecorder::callback() {
  return [this](const ObservationOwner& owner, std::string_view name, SourceKind kind,
                const at::Tensor& tensor, OptionalDim tp, OptionalDim seq,
                OptionalDim batch) { record(owner, name, kind, tensor, tp, seq, batch); };
}

int TraceRecorder::thread_index_locked(std::thread::id id) {
  for (std::size_t i = 0; i < threads_.size(); ++i)
    if (threads_[i] == id) return static_cast<int>(i);
  threads_.push_back(id);
  return static_cast<int>(threads_.size() - 1);
}

void TraceRecorder::record(const ObservationOwner& owner, std::string_view name, SourceKind kind,
                           const at::Tensor& tensor, OptionalDim tp_shard_dim,
                           OptionalDim sequence_dim, OptionalDim batch_dim) {
  // Everything is read from the tensor here, before returning: no reference survives.
  TraceRecord r;
  r.rank = rank_;
  const ExecutionPoint& point = current_execution_point();
  r.step = point.step;
  r.microbatch = point.microbatch;
  r.phase = point.phase;
  r.site = owner.canonical_name() + "." + std::string(name);
  r.kind = kind;
  r.tp_shard_dim = tp_shard_dim;
  r.sequence_dim = sequence_dim;
  r.batch_dim = batch_dim;
  r.grad_mode = at::GradMode::is_enabled();
  at::Tensor kept;
  if (tensor.defined()) {
    r.shape = tensor.sizes().vec();
    r.dtype = dtype_name(tensor.scalar_type());
    r.requires_grad = tensor.requires_grad();
    at::NoGradGuard no_grad;  // the copies below never join the autograd graph
    if (point.phase == GraphPhase::capture && !tensor.is_cpu()) {
      // A device tensor inside a stream capture holds nothing yet (the kernels
      // were recorded, not run) and a copy to the host would invalidate the
      // capture: digest and summary stay empty. (The reference's emulated
      // capture computes NaN contents on the host and records them.)
    } else if (keep_ && keep_(r)) {
      // Our own contiguous CPU copy (.to(kCPU) of a CPU tensor would be the
      // tensor itself); the digest and statistics are read from it, so they
      // describe exactly the bytes kept.
      kept = tensor.is_cpu() ? tensor.detach().clone(at::MemoryFormat::Contiguous)
                             : tensor.detach().to(at::kCPU).contiguous();
      r.digest = tensor_digest(kept);
      r.summary = summarize(kept);
    } else {
      r.digest = tensor_digest(tensor);
      r.summary = summarize(tensor);
    }
  } else {
    r.dtype = "undefined";
  }
  std::uintptr_t begin = 0, end = 0;  // the storage's byte range; empty when none
  if (tensor.defined() && tensor.has_storage() && tensor.storage().nbytes() > 0) {
    begin = reinterpret_cast<std::uintptr_t>(static_cast<const void*>(tensor.storage().data()));
    end = begin + tensor.storage().nbytes();
  }
  const std::string& owner_name = owner.canonical_name();
  std::lock_guard<std::mutex> lock(mutex_);
  r.thread = thread_index_locked(std::this_thread::get_id());
  if (last_accumulator_.size() <= static_cast<std::size_t>(r.thread))
    last_accumulator_.resize(r.thread + 1);
  LastAccumulator& last = last_accumulator_[r.thread];
  if (kind == SourceKind::residual_contribution && last.valid && last.owner == owner_name)
    r.aliases_accumulator = begin < last.end && last.begin < end;
  last.valid = kind == SourceKind::residual_accumulator && begin < end;
  if (last.valid) {
    last.owner = owner_name;
    last.begin = begin;
    last.end = end;
  }
  r.seq = static_cast<std::int64_t>(records_.size());
  if (kept.defined()) kept_.emplace(r.seq, std::move(kept));
  records_.push_back(std::move(r));
}

void TraceRecorder::keep_values(std::function<bool(const TraceRecord&)> keep) {
  std::lock_guard<std::mutex> lock(mutex_);
  keep_ = std::move(keep);
}

std::map<std::int64_t, at::Tensor> TraceRecorder::kept_values() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return kept_;
}

std::vector<TraceRecord> TraceRecorder::records() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return records_;
}

std::int64_t TraceRecorder::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<std::int64_t>(records_.size());
}

std::map<std::string, std::int64_t> TraceRecorder::counts() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::map<std::string, std::int64_t> out;
  for (const TraceRecord& r : records_) ++out[std::string(to_string(r.kind))];
  return out;
}

}  // namespace parity
