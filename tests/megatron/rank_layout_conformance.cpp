// What each rank of parity holds against what Megatron Core gives the same
// rank, read from the JSON tools/megatron/rank_layouts.py writes (label
// `megatron`, tool_live.sh rank_layouts.py). For every layout and global rank:
// the rank's coordinates (ParallelTopology against parallel_state), the
// sequence positions of its CP slice (context_parallel_positions, the model's
// local_positions, against get_batch_on_this_cp_rank), the rows it keeps under
// sequence parallelism (scatter_to_sequence_parallel_region against
// Megatron's), the samples of each of its microbatches (global_microbatch
// against MegatronPretrainingSampler) and, per model variant, the TP / EP / ETP slice
// of every parameter: parity's model is built for that rank (placeholder
// communicators, no collective) from a ParameterSource whose full tensors hold
// their own element indices, and each local tensor must equal the indices
// Megatron's sharded_state_dict offsets select. The parameter names of a rank
// (its routed experts among them) must be Megatron's.
// Usage: rank_layout_conformance MEGATRON.json; exit 0 all equal, 1 not.
#include <ATen/ATen.h>

#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/backend/backend.h"
#include "harness/backend/registry.h"
#include "harness/backend/tp_mappings.h"
#include "harness/model/gpt_model.h"
#include "harness/model/parameter_source.h"
#include "harness/parallel/process_groups.h"
#include "harness/parallel/rendezvous.h"
#include "tests/megatron/conformance.h"

namespace {

using nlohmann::json;
using namespace parity;

using parity::conformance::fail;

template <typename T>
void expect_eq(const std::string& where, const char* what, const T& parity, const T& megatron) {
  if (parity == megatron) return;
  std::ostringstream s;
  s << where << ": " << what << ": parity " << json(parity).dump() << ", Megatron "
    << json(megatron).dump();
  fail(s.str());
}

// The groups of one rank as the launcher makes them (make_rank_groups), over a
// transport that moves nothing: building a model and keeping a chunk need none.
class PlaceholderTransport final : public CollectiveTransport {
 public:
  PlaceholderTransport(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  at::Tensor all_reduce(const at::Tensor&, ReduceOp) override { throw refused(); }
  at::Tensor all_gather(const at::Tensor&, std::int64_t) override { throw refused(); }
  at::Tensor reduce_scatter(const at::Tensor&, std::int64_t, ReduceOp) override { throw refused(); }
  at::Tensor broadcast(const at::Tensor&, int) override { throw refused(); }
  void barrier() override { throw refused(); }

 private:
  static std::logic_error refused() {
    return std::logic_error("a layout check moves no data (placeholder transport)");
  }
  int rank_, size_;
};

class PlaceholderFactory final : public TransportFactory {
 public:
  std::unique_ptr<CollectiveTransport> create(const Rendezvous&, const std::string&, int rank,
                                              int size, std::chrono::milliseconds) override {
    return std::make_unique<PlaceholderTransport>(rank, size);
  }
};

// Every full tensor holds its own row-major element indices; the model keeps
// shard_of(full, spec, tp_rank, tp_size), as it does with any source.
class IndexSource final : public ParameterSource {
 public:
  at::Tensor local_value(const ParameterRequest& r) override {
    const at::Tensor full = indices(r.full_shape);
    return shard_of(full, r.shard, r.tp_rank, r.tp_size).to(r.dtype);
  }
  static at::Tensor indices(const std::vector<std::int64_t>& shape) {
    std::int64_t n = 1;
    for (std::int64_t d : shape) n *= d;
    return at::arange(n, at::kDouble).view(shape);
  }
};

std::vector<std::int64_t> ints_of(const json& j) { return j.get<std::vector<std::int64_t>>(); }

// Megatron's local tensor of element indices: its pieces (global offset and
// local shape in the full tensor) concatenated along dim 0.
at::Tensor megatron_indices(const json& entry) {
  std::vector<at::Tensor> pieces;
  for (const json& p : entry.at("pieces")) {
    at::Tensor t = IndexSource::indices(ints_of(p.at("global_shape")));
    const auto offset = ints_of(p.at("global_offset"));
    const auto local = ints_of(p.at("local_shape"));
    for (std::size_t d = 0; d < local.size(); ++d)
      t = t.narrow(static_cast<std::int64_t>(d), offset[d], local[d]);
    pieces.push_back(t);
  }
  return at::cat(pieces, 0);
}

ModelConfig model_config(const json& v, const json& layout, std::int64_t seq,
                         std::int64_t micro_batch) {
  ModelConfig c;
  c.hidden = v.at("hidden").get<std::int64_t>();
  c.heads = v.at("heads").get<std::int64_t>();
  c.num_query_groups = v.at("groups").get<std::int64_t>();
  c.ffn_hidden = v.at("ffn").get<std::int64_t>();
  c.vocab = v.at("vocab").get<std::int64_t>();
  c.layers = 2;
  c.seq = seq;
  c.micro_batch = micro_batch;
  c.dtype = ModelDType::fp64;  // element indices stay exact
  c.activation =
      v.at("act").get<std::string>() == "swiglu" ? ActivationKind::swiglu : ActivationKind::gelu;
  c.bias_linear = v.at("bias").get<bool>();
  c.untie_embeddings = v.at("untie").get<bool>();
  c.qk_layernorm = v.at("qk_norm").get<bool>();
  c.position_embedding =
      v.at("rope").get<bool>() ? PositionEmbeddingKind::rope : PositionEmbeddingKind::learned;
  c.moe.experts = v.at("experts").get<std::int64_t>();
  if (c.moe.enabled()) {
    c.moe.ffn_hidden = c.ffn_hidden;
    c.moe.shared_expert_ffn = v.value("shared", std::int64_t{0});
  }
  const int tp = layout.at("tp").get<int>();
  c.sequence_parallel = c.moe.enabled() && tp > 1;  // Megatron's rule and parity's
  if (c.moe.enabled()) c.moe.expert_tp = layout.value("etp", tp);
  c.pipeline.pp = layout.at("pp").get<int>();
  return c;
}

struct RankModel {
  std::unique_ptr<Backend> backend;
  RankGroups groups;
  std::unique_ptr<GPTModel> model;
};

RankModel build(const ModelConfig& c, const ParallelTopology& topology, int rank) {
  RankModel m;
  m.backend = make_backend("reference");
  PlaceholderFactory factory;
  const auto rendezvous = Rendezvous::in_process();
  m.groups = make_rank_groups(topology, rank, *rendezvous, factory, nullptr, GroupOptions{});
  IndexSource source;
  m.model = std::make_unique<GPTModel>(c, *m.backend, ParallelContext::from(m.groups), &source);
  return m;
}

std::vector<std::int64_t> tensor_ints(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kCPU).to(at::kLong).contiguous();
  return {c.data_ptr<std::int64_t>(), c.data_ptr<std::int64_t>() + c.numel()};
}

// parity's parameters of one rank against Megatron's; returns the number compared.
int compare_parameters(const std::string& at_rank, GPTModel& model, const json& megatron) {
  const json& params = megatron.at("params");
  std::set<std::string> parity_names, megatron_names;
  for (const auto& [name, entry] : params.items()) megatron_names.insert(name);
  int compared = 0;
  std::map<std::int64_t, std::vector<int>> experts_by_layer;
  for (const Parameter& p : model.parameters()) {
    parity_names.insert(p.name);
    if (p.expert >= 0) {
      const auto layer = std::stoll(p.name.substr(std::string("decoder.layers.").size()));
      std::vector<int>& e = experts_by_layer[layer];
      if (e.empty() || e.back() != p.expert) e.push_back(static_cast<int>(p.expert));
    }
    if (!params.contains(p.name)) continue;
    const json& entry = params.at(p.name);
    const std::string where = at_rank + " " + p.name;
    expect_eq(where, "local shape", p.value.sizes().vec(), ints_of(entry.at("local_shape")));
    const at::Tensor want = megatron_indices(entry);
    if (want.sizes() != p.value.sizes()) continue;  // reported above
    if (!at::equal(p.value.to(at::kCPU).to(at::kDouble), want)) {
      // The first elements of each, enough to see a transposed or swapped block.
      const auto mine =
          tensor_ints(p.value.flatten().narrow(0, 0, std::min<std::int64_t>(8, want.numel())));
      const auto theirs =
          tensor_ints(want.flatten().narrow(0, 0, std::min<std::int64_t>(8, want.numel())));
      expect_eq(where, "element indices (first 8)", mine, theirs);
      if (mine == theirs) fail(where + ": element indices differ after the first 8");
    }
    ++compared;
  }
  std::vector<std::string> only_parity, only_megatron;
  for (const std::string& n : parity_names)
    if (!megatron_names.count(n)) only_parity.push_back(n);
  for (const std::string& n : megatron_names)
    if (!parity_names.count(n)) only_megatron.push_back(n);
  if (!only_parity.empty() || !only_megatron.empty())
    fail(at_rank + ": parameters only parity holds " + json(only_parity).dump() +
         ", only Megatron holds " + json(only_megatron).dump());
  if (megatron.contains("local_experts")) {
    std::vector<std::vector<int>> mine;
    for (const auto& [layer, e] : experts_by_layer) mine.push_back(e);
    expect_eq(at_rank, "local experts per layer", mine,
              megatron.at("local_experts").get<std::vector<std::vector<int>>>());
  }
  return compared;
}

struct Totals {
  int ranks = 0, models = 0, parameters = 0;
};

void compare_case(const json& c, const json& top, Totals& totals) {
  const json& layout = c.at("layout");
  const int tp = layout.at("tp").get<int>(), cp = layout.at("cp").get<int>(),
            dp = layout.at("dp").get<int>(), pp = layout.at("pp").get<int>(),
            ep = layout.at("ep").get<int>(), etp = layout.value("etp", tp);
  const ParallelTopology topology(tp, cp, dp, ep, pp, etp);
  const std::int64_t seq = top.at("seq").get<std::int64_t>();
  const std::int64_t micro_batch = top.at("micro_batch").get<std::int64_t>();
  const std::int64_t microbatches = top.at("microbatches").get<std::int64_t>();
  const std::int64_t steps = top.at("steps").get<std::int64_t>();
  const json& ranks = c.at("ranks");
  if (static_cast<int>(ranks.size()) != topology.world_size()) {
    fail(layout.dump() + ": Megatron reports " + std::to_string(ranks.size()) + " ranks");
    return;
  }
  for (int rank = 0; rank < topology.world_size(); ++rank) {
    const json& m = ranks.at(static_cast<std::size_t>(rank));
    const std::string where = layout.dump() + " rank " + std::to_string(rank);
    const RankCoordinates coord = topology.coordinates(rank);
    const json& mc = m.at("coordinates");
    expect_eq(where, "tp rank", coord.tp, mc.at("tp").get<int>());
    expect_eq(where, "cp rank", coord.cp, mc.at("cp").get<int>());
    expect_eq(where, "dp rank", coord.dp, mc.at("dp").get<int>());
    expect_eq(where, "pp rank", coord.pp, mc.at("pp").get<int>());
    expect_eq(where, "ep rank", topology.ep_rank(rank), mc.at("ep").get<int>());
    expect_eq(where, "expert data parallel rank", topology.expert_data_parallel_rank(rank),
              mc.at("edp").get<int>());
    if (mc.contains("etp"))
      expect_eq(where, "expert tensor parallel rank", topology.expert_tp_rank(rank),
                mc.at("etp").get<int>());

    // Any model of the layout answers these; EP and ETP need routed experts.
    const json& base = top.at("variants").at(ep > 1 || etp != tp ? "moe" : "dense");
    RankModel rm = build(model_config(base, layout, seq, micro_batch), topology, rank);
    const at::Tensor positions = rm.model->local_positions();
    expect_eq(where, "CP positions", tensor_ints(positions),
              m.at("cp_positions").get<std::vector<std::int64_t>>());
    expect_eq(where, "context_parallel_positions",
              tensor_ints(context_parallel_positions(seq, cp, coord.cp)),
              m.at("cp_positions").get<std::vector<std::int64_t>>());
    // The activations' [s_local, b] order; the model scatters its embedding output so.
    const at::Tensor sp =
        scatter_to_sequence_parallel_region(positions.view({-1, 1}), rm.model->parallel().tp);
    expect_eq(where, "SP rows", tensor_ints(sp.select(1, 0)),
              m.at("sp_positions").get<std::vector<std::int64_t>>());
    std::vector<std::vector<std::int64_t>> samples;
    for (std::int64_t s = 0; s < steps; ++s)
      for (std::int64_t mb = 0; mb < microbatches; ++mb) {
        const std::int64_t g =
            s * microbatches * dp + rm.model->global_microbatch(mb, microbatches);
        std::vector<std::int64_t> rows;
        for (std::int64_t j = 0; j < micro_batch; ++j) rows.push_back(g * micro_batch + j);
        samples.push_back(rows);
      }
    expect_eq(where, "samples per microbatch", samples,
              m.at("samples").get<std::vector<std::vector<std::int64_t>>>());
    ++totals.ranks;

    if (!m.contains("models")) continue;
    for (const auto& [variant, megatron] : m.at("models").items()) {
      const json& v = top.at("variants").at(variant);
      RankModel vm = build(model_config(v, layout, seq, micro_batch), topology, rank);
      totals.parameters += compare_parameters(where + " " + variant, *vm.model, megatron);
      ++totals.models;
    }
  }
}

}  // namespace

namespace parity::conformance {

Summary compare(const json& megatron) {
  Totals totals;
  const json& cases = megatron.at("cases");
  for (const json& c : cases) {
    try {
      compare_case(c, megatron, totals);
    } catch (const std::exception& e) {
      fail(c.at("layout").dump() + ": " + e.what());
    }
  }
  // The grid must reach every kind of answer, or nothing above compared it.
  if (totals.ranks < 100 || totals.models < 100 || totals.parameters < 1000)
    fail("too little compared: " + std::to_string(totals.ranks) + " ranks, " +
         std::to_string(totals.models) + " models, " + std::to_string(totals.parameters) +
         " parameters");
  std::ostringstream counts;
  counts << cases.size() << " layouts, " << totals.ranks << " ranks, " << totals.models
         << " rank models, " << totals.parameters << " parameter slices compared";
  return {"per-rank layouts", counts.str()};
}

}  // namespace parity::conformance
