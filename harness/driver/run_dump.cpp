#include "harness/driver/run_dump.h"

#include <ATen/ATen.h>

#include <cstdio>
#include <cstring>
#include <set>
#include <stdexcept>

#include "harness/base/check.h"
#include "harness/base/safetensors.h"
#include "harness/model/gpt_model.h"
#include "harness/model/loaded_batch.h"
#include "harness/parallel/byte_gather.h"
#include "harness/trace/trace_recorder.h"

namespace parity {

std::string dump_staging_path(const std::string& dir) { return dir + ".partial"; }

std::string observations_file_name(int rank) {
  return "observations.rank" + std::to_string(rank) + ".safetensors";
}

std::string observation_key(std::int64_t seq, const std::string& site) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "seq%05lld.", static_cast<long long>(seq));
  return buf + site;
}

bool dump_keeps_values_of(const TraceRecord& record) { return record.step == 0; }

RunDump::RunDump(GPTModel& model, std::string staging, bool writer, std::int64_t steps,
                 std::int64_t microbatches, const LoadedBatch* batch)
    : model_(model),
      staging_(std::move(staging)),
      writer_(writer),
      steps_(steps),
      microbatches_(microbatches),
      batch_(batch) {}

void RunDump::write(const std::string& file, const std::string& holds,
                    const std::vector<std::pair<std::string, at::Tensor>>& tensors, bool writer) {
  if (!writer) return;
  nlohmann::json entry = {{"holds", holds}, {"tensors", nlohmann::json::object()}};
  for (const auto& [name, t] : tensors)
    entry["tensors"][name] = {{"dtype", safetensors::dtype_name(t.scalar_type())},
                              {"shape", t.sizes().vec()}};
  files_[file] = entry;
  safetensors::write_file(staging_ + "/" + file, tensors);
}

at::Tensor RunDump::full_parameter_tensor(const at::Tensor& local, const ShardSpec& spec,
                                          bool expert) const {
  // A routed expert's pieces lie over the expert TP group (--etp).
  Communicator* tp = expert ? model_.parallel().expert_tp() : model_.parallel().tp;
  at::Tensor t = local.detach().to(at::kCPU).contiguous();
  if (spec.replicated() || tp == nullptr || tp->size() == 1) return t;
  const at::Tensor all = tp->all_gather(local.detach().contiguous(), spec.dim).to(at::kCPU);
  return unshard(all.chunk(tp->size(), spec.dim), spec);
}

std::vector<std::pair<std::string, at::Tensor>> RunDump::full_tensors(
    const Parameter& p, const at::Tensor& local) const {
  Communicator* ep = model_.parallel().ep;
  if (p.expert < 0 || ep == nullptr || ep->size() == 1)
    return {{p.name, full_parameter_tensor(local, p.shard, p.expert >= 0)}};
  // Every EP rank holds E / ep experts in the same places of its parameter list,
  // so this slot holds expert p.expert + (r - ep_rank) * (E / ep) on EP rank r.
  Communicator* tp = model_.parallel().expert_tp();  // the expert TP group (--etp)
  at::Tensor full = local.detach().contiguous();
  if (!p.shard.replicated() && tp != nullptr && tp->size() > 1)
    full = unshard(tp->all_gather(full, p.shard.dim).chunk(tp->size(), p.shard.dim), p.shard);
  const at::Tensor all = ep->all_gather(full.unsqueeze(0).contiguous(), 0).to(at::kCPU);
  const std::int64_t per_rank = model_.config().moe.experts / ep->size();
  const std::string own = ".local_experts." + std::to_string(p.expert) + ".";
  const std::size_t at = p.name.find(own);
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (int r = 0; r < ep->size(); ++r) {
    const std::int64_t g = p.expert + (r - ep->rank()) * per_rank;
    std::string name = p.name;
    if (at != std::string::npos)
      name.replace(at, own.size(), ".local_experts." + std::to_string(g) + ".");
    out.emplace_back(std::move(name), all[r].contiguous());
  }
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> RunDump::from_every_stage(
    std::vector<std::pair<std::string, at::Tensor>> mine) const {
  Communicator* pp = model_.parallel().pp;
  if (pp == nullptr || pp->size() == 1) return mine;
  const std::string bytes = safetensors::serialize(mine);
  const at::Tensor packed = at::empty({static_cast<std::int64_t>(bytes.size())}, at::kByte);
  std::memcpy(packed.data_ptr(), bytes.data(), bytes.size());
  std::vector<std::pair<std::string, at::Tensor>> out;
  std::set<std::string> seen;
  int stage = 0;
  for (const at::Tensor& b : all_gather_bytes(*pp, packed)) {
    const std::string_view view(static_cast<const char*>(b.data_ptr()),
                                static_cast<std::size_t>(b.numel()));
    for (auto& [name, t] :
         safetensors::parse(view, "pipeline stage " + std::to_string(stage++)).tensors)
      if (seen.insert(name).second) out.emplace_back(name, t.clone());
  }
  return out;
}

at::Tensor RunDump::gather_batch(const std::vector<at::Tensor>& per_microbatch,
                                 bool vocab_sharded) const {
  const ParallelContext& par = model_.parallel();
  std::vector<at::Tensor> rows;
  for (const at::Tensor& local : per_microbatch) {
    at::Tensor t = local.detach().contiguous();
    if (vocab_sharded && par.tp_size() > 1) t = par.tp->all_gather(t, t.dim() - 1);
    if (par.cp_size() > 1) {
      // CP ranks hold chunks of the sequence at their global positions.
      const at::Tensor gathered = par.cp->all_gather(t.contiguous(), 0).to(at::kCPU);
      const at::Tensor positions =
          par.cp->all_gather(model_.local_positions().contiguous(), 0).to(at::kCPU);
      t = at::empty_like(gathered).index_copy_(0, positions, gathered);
    }
    // Packed sequences: the single rank's layout, padding rows zero.
    t = model_.to_single_rank_layout(t.to(at::kCPU));
    rows.push_back(t.to(at::kCPU).transpose(0, 1));  // [b, seq, ...]
  }
  at::Tensor step = at::cat(rows, 0).contiguous();  // row m * b + j
  if (par.dp_size() > 1) {
    // Gathered in DP rank order [d][m]; the step's global microbatch of DP
    // rank d's microbatch m is m * dp + d (GPTModel::global_microbatch).
    const at::Tensor gathered = par.dp->all_gather(step, 0).to(at::kCPU);
    std::vector<std::int64_t> shape = gathered.sizes().vec();
    std::vector<std::int64_t> split{par.dp_size(), static_cast<std::int64_t>(rows.size()), -1};
    split.insert(split.end(), shape.begin() + 1, shape.end());
    step = gathered.reshape(split).transpose(0, 1).reshape(shape).contiguous();
  }
  return step;
}

void RunDump::write_weights_and_inputs() {
  std::vector<std::pair<std::string, at::Tensor>> weights;
  for (const Parameter& p : model_.parameters())
    for (auto& entry : full_tensors(p, p.value)) weights.push_back(std::move(entry));
  write("weights.safetensors", "the initial weights, full (unsharded), Megatron's key names",
        from_every_stage(std::move(weights)));
  const std::int64_t per_step = microbatches_ * model_.parallel().dp_size();
  std::vector<at::Tensor> tokens, labels;
  for (std::int64_t i = 0; i < steps_ * per_step; ++i) {
    // Packed sequences: the single rank's layout, as a loaded batch holds it.
    const MicrobatchData d = batch_ ? batch_->microbatch(i) : model_.microbatch(i);
    tokens.push_back((batch_ ? d.tokens : model_.to_single_rank_layout(d.tokens)).t());
    labels.push_back((batch_ ? d.labels : model_.to_single_rank_layout(d.labels)).t());
  }
  write("batch.safetensors",
        "every step's inputs, int64 [steps * global batch, seq]: row (s * G + g) * micro_batch + "
        "j is sequence j of global microbatch g of step s (G microbatches per step)",
        {{"tokens", at::cat(tokens).contiguous()}, {"labels", at::cat(labels).contiguous()}});
}

void RunDump::write_outputs(std::int64_t step, const std::vector<at::Tensor>& logits,
                            const std::vector<at::Tensor>& token_losses) {
  if (step != 0) return;
  // Under PP only the last stage holds outputs (the others get empty lists).
  std::vector<std::pair<std::string, at::Tensor>> outputs;
  if (!logits.empty()) {
    const bool sharded = logits[0].size(-1) != model_.config().vocab;
    outputs.emplace_back("logits", gather_batch(logits, sharded));
    outputs.emplace_back("loss", gather_batch(token_losses, false));
  }
  outputs = from_every_stage(std::move(outputs));
  PARITY_CHECK_INTERNAL(outputs.size() == 2, "--dump: no stage holds the step's logits");
  write("logits.safetensors", "step 0's logits, [global batch, seq, vocab] (gathered)",
        {outputs[0]});
  write("loss.safetensors", "step 0's per-token cross entropy, [global batch, seq]", {outputs[1]});
}

void RunDump::write_gradients(std::int64_t step) {
  if (step != 0) return;
  std::vector<std::pair<std::string, at::Tensor>> grads;
  for (const Parameter& p : model_.parameters()) {
    const at::Tensor g = p.value.grad().defined() ? p.value.grad() : at::zeros_like(p.value);
    for (auto& [name, t] : full_tensors(p, g)) grads.emplace_back("grad." + name, std::move(t));
  }
  write("grads.safetensors",
        "step 0's gradients after finalize_grads (of the mean loss over the global batch), "
        "full, named grad.<parameter>",
        from_every_stage(std::move(grads)));
}

void RunDump::write_observations(const TraceRecorder& recorder) {
  const std::map<std::int64_t, at::Tensor> kept = recorder.kept_values();
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const TraceRecord& r : recorder.records()) {
    const auto it = kept.find(r.seq);
    if (it != kept.end()) tensors.emplace_back(observation_key(r.seq, r.site), it->second);
  }
  const int rank = recorder.rank();
  write(observations_file_name(rank),
        "rank " + std::to_string(rank) + "'s observations of step 0, this rank's local shards " +
            "as observed: seq<NNNNN>.<site> holds the values of the trace.jsonl record with " +
            "\"rank\": " + std::to_string(rank) + " and that seq",
        tensors, /*writer=*/true);
}

}  // namespace parity
