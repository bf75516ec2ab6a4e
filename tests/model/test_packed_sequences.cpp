// Packed sequences (harness/model/sequence_packing.h): the layout (Megatron's
// cu_seqlens_padded, Transformer Engine's per-document CP partition), the
// documents' data, and a packed batch on one rank against the same documents
// run one by one: observations, metrics (padding in no population), loss and
// every gradient, in fp64. Negative control: the fault packed-positions-global.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "harness/backend/registry.h"
#include "harness/config/model_mapping.h"
#include "harness/config/run_config.h"
#include "harness/faults/code_path_faults.h"
#include "harness/metrics/collector.h"
#include "harness/metrics/executor.h"
#include "harness/metrics/metric_names.h"
#include "harness/model/gpt_model.h"
#include "harness/model/sequence_packing.h"
#include "harness/observation/tensor_observation.h"
#include "harness/parallel/process_groups.h"
#include "harness/trace/trace_recorder.h"
#include "tests/support/model_configs.h"
#include "tests/support/named_owner.h"

PARITY_USES_FAULT(packed_positions_global);

namespace parity {
namespace {

std::vector<std::int64_t> values(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kLong).contiguous();
  return std::vector<std::int64_t>(c.data_ptr<std::int64_t>(),
                                   c.data_ptr<std::int64_t>() + c.numel());
}

TEST(SequencePacking, EachDocumentIsPaddedToTwiceCpAndTheLastRunsToTheSequenceEnd) {
  const SequencePacking p = pack_sequences({5, 11, 8}, 32, 2);
  EXPECT_EQ(p.padded_starts, (std::vector<std::int64_t>{0, 8, 20}));
  EXPECT_EQ(p.padded_lengths, (std::vector<std::int64_t>{8, 12, 12}));
  EXPECT_EQ(p.valid_tokens(), 24);
  EXPECT_EQ(packed_span({5, 11, 8}, 2), 28);
  // Without CP no document is padded; the sequence's rest belongs to the last.
  const SequencePacking one = pack_sequences({5, 11, 8}, 32, 1);
  EXPECT_EQ(one.padded_starts, (std::vector<std::int64_t>{0, 5, 16}));
  EXPECT_EQ(one.padded_lengths, (std::vector<std::int64_t>{5, 11, 16}));
  EXPECT_THROW(pack_sequences({5, 11, 8}, 24, 2), std::invalid_argument);
  const PackedPositionTables t = packed_position_tables(p, at::kCPU);
  EXPECT_EQ(values(t.document.narrow(0, 6, 4)), (std::vector<std::int64_t>{0, 0, 1, 1}));
  EXPECT_EQ(values(t.position_in_document.narrow(0, 18, 4)),
            (std::vector<std::int64_t>{10, 11, 0, 1}));
  EXPECT_EQ(t.valid.sum().item<std::int64_t>(), 24);
  EXPECT_FALSE(t.valid[5].item<bool>());
  EXPECT_TRUE(t.valid[4].item<bool>());
}

TEST(SequencePacking, EachCpRankHoldsChunksRAndItsMirrorOfEveryDocument) {
  const SequencePacking p = pack_sequences({5, 11, 8}, 32, 2);
  // Documents of 8, 12, 12 padded positions in 4 chunks of 2, 3, 3.
  EXPECT_EQ(values(packed_context_parallel_positions(p, 0)),
            (std::vector<std::int64_t>{0, 1, 6, 7, 8, 9, 10, 17, 18, 19, 20, 21, 22, 29, 30, 31}));
  EXPECT_EQ(
      values(packed_context_parallel_positions(p, 1)),
      (std::vector<std::int64_t>{2, 3, 4, 5, 11, 12, 13, 14, 15, 16, 23, 24, 25, 26, 27, 28}));
  const SequencePacking four = pack_sequences({3, 9}, 32, 4);  // padded 8, 24
  std::vector<std::int64_t> all;
  for (int r = 0; r < 4; ++r)
    for (std::int64_t v : values(packed_context_parallel_positions(four, r))) all.push_back(v);
  std::sort(all.begin(), all.end());
  std::vector<std::int64_t> every(32);
  std::iota(every.begin(), every.end(), 0);
  EXPECT_EQ(all, every);
}

TEST(SequencePacking, ADocumentHoldsTheSameTokensWhateverThePadding) {
  const SequencePacking cp1 = pack_sequences({5, 11, 8}, 32, 1);
  const SequencePacking cp2 = pack_sequences({5, 11, 8}, 32, 2);
  const MicrobatchData a = packed_microbatch_data(7, 3, cp1, 1, 50);
  const MicrobatchData b = packed_microbatch_data(7, 3, cp2, 1, 50);
  for (std::size_t d = 0; d < 3; ++d) {
    const std::int64_t n = cp1.lengths[d];
    EXPECT_TRUE(at::equal(a.tokens.narrow(0, cp1.padded_starts[d], n),
                          b.tokens.narrow(0, cp2.padded_starts[d], n)));
    EXPECT_TRUE(at::equal(a.labels.narrow(0, cp1.padded_starts[d], n),
                          b.labels.narrow(0, cp2.padded_starts[d], n)));
  }
  // Labels are the next token of the document stream.
  EXPECT_TRUE(at::equal(a.labels.narrow(0, 0, 4), a.tokens.narrow(0, 1, 4)));
  EXPECT_EQ(b.tokens[6][0].item<std::int64_t>(), 0);  // padding
}

TEST(SequencePacking, ParsesACommaListAndNamesWhatIsNotAnInteger) {
  EXPECT_EQ(parse_packed_seq_lengths("5,11,8", nullptr), (std::vector<std::int64_t>{5, 11, 8}));
  std::string why;
  EXPECT_FALSE(parse_packed_seq_lengths("5,x", &why).has_value());
  EXPECT_EQ(why, "\"x\" is not an integer (a comma list of document lengths)");
  EXPECT_FALSE(parse_packed_seq_lengths("5,,8", &why).has_value());
}

TEST(SequencePacking, TheRunOptionMapsOntoTheModelAndItsRulesNameTheOption) {
  RunConfig c;
  c.packed_seq_lengths = "5,11";
  c.seq = 32;
  c.micro_batch = 1;
  EXPECT_TRUE(validate_run_config(c).empty());
  EXPECT_EQ(model_config_from(c).packed_seq_lengths, (std::vector<std::int64_t>{5, 11}));
  c.micro_batch = 2;  // Megatron's THD batches hold one packed sequence per microbatch
  const std::vector<ConfigViolation> v = validate_run_config(c);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].field, "packed-seq-lengths");
  EXPECT_EQ(v[0].value, "5,11");
  EXPECT_EQ(v[0].rule,
            "a packed (THD) microbatch is one sequence of documents: needs micro_batch 1 "
            "(Megatron's THD batches), not 2");
  c.micro_batch = 1;
  c.packed_seq_lengths = "5,eleven";
  ASSERT_EQ(validate_run_config(c).size(), 1u);
  EXPECT_EQ(validate_run_config(c)[0].rule,
            "\"eleven\" is not an integer (a comma list of document lengths)");
}

// ------------------------------------------------------------------ one rank
ModelConfig packed_config(PositionEmbeddingKind position) {
  ModelConfig c = testing::small_config<ModelConfig>();
  c.dtype = ModelDType::fp64;
  c.micro_batch = 1;
  c.seq = 32;
  c.seed = 5;
  c.position_embedding = position;
  c.packed_seq_lengths = {5, 11, 8};
  return c;
}

struct RunOutput {
  at::Tensor logits, token_losses;
  std::map<std::string, at::Tensor> sites;  // "owner.name" -> the observed tensor
  std::map<std::string, SourceKind> kinds;
  std::map<std::string, at::Tensor> grads;
};

// One forward and backward of `tokens` with the loss sum(token losses) * scale.
RunOutput run_once(GPTModel& model, const MicrobatchData& data, double scale) {
  RunOutput out;
  {
    auto capture = capture_tensor_observations(
        [&](const ObservationOwner& owner, std::string_view name, SourceKind kind,
            const at::Tensor& t, OptionalDim, OptionalDim, OptionalDim) {
          const std::string site = owner.canonical_name() + "." + std::string(name);
          EXPECT_EQ(out.sites.count(site), 0u) << site << " observed twice";
          out.sites[site] = t.detach().clone();
          out.kinds[site] = kind;
        },
        first_wave_kinds());
    out.logits = model.forward(model.slice_sequence(data.tokens), model.local_positions());
  }
  out.token_losses = model.token_losses(out.logits, model.slice_sequence(data.labels));
  (out.token_losses.sum() * scale).backward();
  for (Parameter& p : model.parameters()) out.grads[p.name] = p.value.grad().clone();
  out.logits = out.logits.detach();
  out.token_losses = out.token_losses.detach();
  return out;
}

// Document d's rows of a packed [seq, ...] tensor.
at::Tensor rows_of(const SequencePacking& p, std::size_t d, const at::Tensor& t) {
  return t.narrow(0, p.padded_starts[d], p.lengths[d]);
}

RankGroups single_rank_groups() {
  RankGroups g;
  for (auto [slot, axis] :
       {std::pair{&g.tp, Axis::tp}, {&g.cp, Axis::cp}, {&g.dp, Axis::dp}, {&g.world, Axis::world}})
    *slot = std::make_unique<Communicator>(axis, std::vector<int>{0}, 0, nullptr, nullptr,
                                           CommunicatorOptions{});
  return g;
}

std::map<std::string, double> metrics_of(const std::map<std::string, at::Tensor>& sites,
                                         const std::map<std::string, SourceKind>& kinds,
                                         const at::Tensor& valid) {
  std::vector<MetricSpec> specs;
  for (const MetricSpec& s : known_metrics())
    if (s.source == MetricSource::observation && first_wave_kinds().contains(s.kind))
      specs.push_back(s);
  MetricCollector collector(make_metrics(specs), ParallelTopology(1, 1, 1), 0);
  collector.set_valid_tokens(valid, at::Tensor());
  for (const auto& [site, t] : sites) {
    const std::size_t dot = site.rfind('.');
    const testing::NamedOwner owner(site.substr(0, dot));
    const OptionalDim tp_dim = kinds.at(site) == SourceKind::attention_context ||
                                       kinds.at(site) == SourceKind::output_logits
                                   ? OptionalDim(-1)
                                   : std::nullopt;
    collector.observe(owner, site.substr(dot + 1), kinds.at(site), t, tp_dim, 0, 1,
                      {0, 0, GraphPhase::eager});
  }
  RankGroups g = single_rank_groups();
  MetricExecutor executor(g);
  std::map<std::string, double> out;
  for (const MetricResult& r : collector.commit(executor)) out[r.metric + "@" + r.label] = r.value;
  return out;
}

class PackedOnOneRank : public ::testing::TestWithParam<PositionEmbeddingKind> {};

TEST_P(PackedOnOneRank, EqualsItsDocumentsRunOneByOne) {
  const ModelConfig config = packed_config(GetParam());
  const std::unique_ptr<Backend> backend = make_backend("reference");
  GPTModel packed(config, *backend, ParallelContext::single());
  const SequencePacking& p = *packed.packing();
  const MicrobatchData data = packed.microbatch(2);
  const double n = double(p.valid_tokens());
  const RunOutput whole = run_once(packed, data, 1.0 / n);

  std::vector<RunOutput> docs;
  std::map<std::string, at::Tensor>
      summed;  // the documents' gradients, padded to the packed shapes
  for (std::size_t d = 0; d < p.lengths.size(); ++d) {
    ModelConfig alone = config;
    alone.packed_seq_lengths.clear();
    alone.seq = p.lengths[d];
    GPTModel model(alone, *backend, ParallelContext::single());
    std::map<std::string, at::Tensor> from;
    for (Parameter& q : packed.parameters()) from[q.name] = q.value;
    {
      at::NoGradGuard no_grad;  // the packed model's weights (its position table's first rows)
      for (Parameter& q : model.parameters())
        q.value.copy_(from.at(q.name).narrow(0, 0, q.value.size(0)));
    }
    const MicrobatchData mine{rows_of(p, d, data.tokens), rows_of(p, d, data.labels)};
    docs.push_back(run_once(model, mine, 1.0 / n));
    for (const auto& [name, g] : docs.back().grads) {
      if (!summed.count(name)) summed[name] = at::zeros_like(from.at(name));
      summed[name].narrow(0, 0, g.size(0)).add_(g);
    }
  }

  // Every observation's rows of document d are the document's own observation.
  ASSERT_EQ(whole.sites.size(), docs[0].sites.size());
  std::map<std::string, at::Tensor> concatenated;
  for (const auto& [site, t] : whole.sites) {
    std::vector<at::Tensor> parts;
    for (std::size_t d = 0; d < docs.size(); ++d) {
      ASSERT_TRUE(docs[d].sites.count(site)) << site;
      EXPECT_TRUE(at::allclose(rows_of(p, d, t), docs[d].sites.at(site), 1e-10, 1e-12))
          << site << " document " << d;
      parts.push_back(docs[d].sites.at(site));
    }
    concatenated[site] = at::cat(parts);
  }
  // The loss counts the documents' tokens only.
  double doc_losses = 0;
  for (const RunOutput& r : docs) doc_losses += r.token_losses.sum().item<double>();
  EXPECT_NEAR(whole.token_losses.sum().item<double>(), doc_losses, 1e-10 * doc_losses);
  const at::Tensor valid = packed.local_valid_tokens();
  EXPECT_EQ(
      whole.token_losses.masked_select(valid.logical_not().unsqueeze(1)).abs().sum().item<double>(),
      0.0);
  // Every gradient is the sum of the documents' gradients.
  for (const auto& [name, g] : whole.grads)
    EXPECT_TRUE(at::allclose(g, summed.at(name), 1e-9, 1e-12)) << name;
  // Every metric of the packed batch (padding left out) is the documents' metric.
  const std::map<std::string, double> a = metrics_of(whole.sites, whole.kinds, valid);
  const std::map<std::string, double> b = metrics_of(concatenated, whole.kinds, at::Tensor());
  ASSERT_FALSE(a.empty());
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [key, v] : a) {
    ASSERT_TRUE(b.count(key)) << key;
    EXPECT_NEAR(v, b.at(key), 1e-9 * (1 + std::abs(v))) << key;
  }
  // With the padding counted (no mask) the packed metrics differ: the mask matters.
  const std::map<std::string, double> unmasked = metrics_of(whole.sites, whole.kinds, at::Tensor());
  EXPECT_GT(std::abs(unmasked.at("global-output-logits-l2@global") -
                     b.at("global-output-logits-l2@global")),
            1e-6);
}

INSTANTIATE_TEST_SUITE_P(Positions, PackedOnOneRank,
                         ::testing::Values(PositionEmbeddingKind::learned,
                                           PositionEmbeddingKind::rope),
                         [](const ::testing::TestParamInfo<PositionEmbeddingKind>& info) {
                           return info.param == PositionEmbeddingKind::rope ? "rope" : "learned";
                         });

TEST(PackedOnOneRank, PositionsThatDoNotRestartPerDocumentChangeTheLaterDocuments) {
  const ModelConfig config = packed_config(PositionEmbeddingKind::learned);
  const std::unique_ptr<Backend> backend = make_backend("reference");
  GPTModel model(config, *backend, ParallelContext::single());
  const MicrobatchData data = model.microbatch(0);
  const at::Tensor right = run_once(model, data, 1.0).logits;
  CodePathFaultScope fault(fault_packed_positions_global);
  const at::Tensor wrong = run_once(model, data, 1.0).logits;
  const SequencePacking& p = *model.packing();
  EXPECT_TRUE(at::equal(rows_of(p, 0, right), rows_of(p, 0, wrong)));  // it starts at 0
  EXPECT_FALSE(at::allclose(rows_of(p, 1, right), rows_of(p, 1, wrong), 1e-6, 1e-8));
}

}  // namespace
}  // namespace parity
