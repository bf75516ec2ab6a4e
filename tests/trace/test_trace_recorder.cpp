// The trace recorder: what one record holds, that it compacts at once (keeps
// no reference to the tensor), labels from the ExecutionPoint, stable thread
// indices, and the JSONL form (docs/trace-format.md).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <limits>
#include <thread>

#include <nlohmann/json.hpp>

#include "harness/backend/stable_hash.h"
#include "harness/observation/execution_point.h"
#include "harness/trace/trace_recorder.h"
#include "tests/support/named_owner.h"

namespace parity {
namespace {

using Owner = testing::NamedOwner;

TEST(TraceRecorder, RecordsEveryFieldOfANotification) {
  TraceRecorder recorder(3);
  const Owner owner("decoder.layers.1.mlp");
  const at::Tensor t = at::arange(6, at::kFloat).reshape({3, 2}).requires_grad_();
  {
    auto scope = capture_tensor_observations(recorder.callback(), first_wave_kinds());
    ExecutionPointScope point(ExecutionPoint{4, 1, GraphPhase::replay});
    observe_tensor(owner, "mlp_output", SourceKind::mlp_output, t, std::nullopt, 0, 1);
    // Not in the kind set: not recorded.
    observe_tensor(owner, "router_logits", SourceKind::router_logits, t);
  }
  const std::vector<TraceRecord> records = recorder.records();
  ASSERT_EQ(records.size(), 1u);
  const TraceRecord& r = records[0];
  EXPECT_EQ(r.rank, 3);
  EXPECT_EQ(r.seq, 0);
  EXPECT_EQ(r.step, 4);
  EXPECT_EQ(r.microbatch, 1);
  EXPECT_EQ(r.phase, GraphPhase::replay);
  EXPECT_EQ(r.site, "decoder.layers.1.mlp.mlp_output");
  EXPECT_EQ(r.kind, SourceKind::mlp_output);
  EXPECT_EQ(r.tp_shard_dim, std::nullopt);
  EXPECT_EQ(r.sequence_dim, OptionalDim{0});
  EXPECT_EQ(r.batch_dim, OptionalDim{1});
  EXPECT_EQ(r.shape, (std::vector<std::int64_t>{3, 2}));
  EXPECT_EQ(r.dtype, "float32");
  EXPECT_TRUE(r.grad_mode);
  EXPECT_TRUE(r.requires_grad);
  EXPECT_EQ(r.thread, 0);
  EXPECT_EQ(r.summary.numel, 6);
  EXPECT_EQ(r.summary.sum, 15.0);
  EXPECT_EQ(r.summary.sum_sq, 55.0);
  EXPECT_EQ(r.summary.min, 0.0);
  EXPECT_EQ(r.summary.max, 5.0);
  EXPECT_EQ(r.summary.nan, 0);
  EXPECT_EQ(r.summary.inf, 0);
  // FNV-1a over the 24 bytes of the float32 values.
  const at::Tensor c = t.detach().contiguous();
  EXPECT_EQ(r.digest, fnv1a64(std::string_view(static_cast<const char*>(c.data_ptr()), 24)));
  EXPECT_EQ(recorder.counts(), (std::map<std::string, std::int64_t>{{"mlp_output", 1}}));
}

TEST(TraceRecorder, GradModeIsTheOneAtNotification) {
  TraceRecorder recorder(0);
  const Owner owner("output_layer");
  auto scope = capture_tensor_observations(recorder.callback(), first_wave_kinds());
  {
    at::NoGradGuard no_grad;
    observe_tensor(owner, "output_logits", SourceKind::output_logits, at::ones({2}), -1, 0, 1);
  }
  observe_tensor(owner, "output_logits", SourceKind::output_logits, at::ones({2}), -1, 0, 1);
  const auto records = recorder.records();
  ASSERT_EQ(records.size(), 2u);
  EXPECT_FALSE(records[0].grad_mode);
  EXPECT_TRUE(records[1].grad_mode);
  EXPECT_EQ(records[0].tp_shard_dim, OptionalDim{-1});
  EXPECT_EQ(records[0].step, -1);  // outside any step
  EXPECT_EQ(records[1].seq, 1);
}

TEST(TraceRecorder, CompactsAtOnceAndKeepsNoReference) {
  TraceRecorder recorder(0);
  const Owner owner("decoder.layers.0");
  at::Tensor buffer = at::full({4, 2, 3}, 2.0, at::kDouble);  // a "static buffer"
  {
    auto scope = capture_tensor_observations(recorder.callback(), first_wave_kinds());
    const auto uses = buffer.use_count();
    observe_tensor(owner, "residual_accumulator", SourceKind::residual_accumulator, buffer,
                   std::nullopt, 0, 1);
    EXPECT_EQ(buffer.use_count(), uses);
    EXPECT_EQ(buffer.storage().use_count(), 1);
    buffer.fill_(7.0);  // the next replay overwrites it
    observe_tensor(owner, "residual_accumulator", SourceKind::residual_accumulator, buffer,
                   std::nullopt, 0, 1);
  }
  const auto records = recorder.records();
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].summary.sum, 48.0);
  EXPECT_EQ(records[1].summary.sum, 168.0);
  EXPECT_NE(records[0].digest, records[1].digest);
}

TEST(TraceRecorder, KeepValuesStoresOwnContiguousCopiesOfTheChosenRecordsBySeq) {
  TraceRecorder recorder(0);
  const Owner owner("decoder.layers.0");
  recorder.keep_values([](const TraceRecord& r) { return r.step == 0; });
  // A non-contiguous view of a "static buffer" that requires grad.
  at::Tensor buffer = at::arange(6, at::kDouble).reshape({2, 3});
  const at::Tensor view = buffer.t().requires_grad_();
  {
    auto scope = capture_tensor_observations(recorder.callback(), first_wave_kinds());
    {
      ExecutionPointScope point(ExecutionPoint{0, 0, GraphPhase::eager});
      observe_tensor(owner, "residual_accumulator", SourceKind::residual_accumulator, view,
                     std::nullopt, 0, 1);
    }
    {
      ExecutionPointScope point(ExecutionPoint{1, 0, GraphPhase::eager});  // not kept
      observe_tensor(owner, "residual_accumulator", SourceKind::residual_accumulator, view,
                     std::nullopt, 0, 1);
    }
    {
      ExecutionPointScope point(ExecutionPoint{0, 1, GraphPhase::eager});
      observe_tensor(owner, "residual_contribution", SourceKind::residual_contribution,
                     at::ones({2}, at::kFloat), std::nullopt, 0, 1);
    }
  }
  buffer.fill_(-1.0);  // the next replay overwrites the buffer: the copy must not change
  const std::map<std::int64_t, at::Tensor> kept = recorder.kept_values();
  ASSERT_EQ(kept.size(), 2u);
  ASSERT_EQ(kept.count(0), 1u);
  ASSERT_EQ(kept.count(2), 1u);
  const at::Tensor& v = kept.at(0);
  EXPECT_TRUE(v.is_contiguous());
  EXPECT_FALSE(v.requires_grad());
  EXPECT_EQ(v.scalar_type(), at::kDouble);
  EXPECT_EQ(v.sizes().vec(), (std::vector<std::int64_t>{3, 2}));
  EXPECT_TRUE(at::equal(v, at::arange(6, at::kDouble).reshape({2, 3}).t()));
  EXPECT_EQ(kept.at(2).scalar_type(), at::kFloat);
  // The records describe the kept bytes.
  const std::vector<TraceRecord> records = recorder.records();
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].digest, tensor_digest(v));
  EXPECT_EQ(records[0].summary.sum, 15.0);
  EXPECT_EQ(records[2].digest, tensor_digest(kept.at(2)));
  // Without keep_values nothing is kept.
  TraceRecorder plain(0);
  {
    auto scope = capture_tensor_observations(plain.callback(), first_wave_kinds());
    observe_tensor(owner, "residual_accumulator", SourceKind::residual_accumulator, view,
                   std::nullopt, 0, 1);
  }
  EXPECT_EQ(plain.size(), 1);
  EXPECT_TRUE(plain.kept_values().empty());
}

TEST(TraceRecorder, NonFiniteValuesAreCountedApart) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const TensorSummary s = summarize(at::tensor({1.0, nan, -inf, 3.0, inf, nan}, at::kDouble));
  EXPECT_EQ(s.numel, 6);
  EXPECT_EQ(s.nan, 2);
  EXPECT_EQ(s.inf, 2);
  EXPECT_EQ(s.sum, 4.0);
  EXPECT_EQ(s.sum_sq, 10.0);
  EXPECT_EQ(s.min, 1.0);
  EXPECT_EQ(s.max, 3.0);
  const TensorSummary poisoned = summarize(at::full({3}, nan, at::kFloat));
  EXPECT_EQ(poisoned.nan, 3);
  EXPECT_FALSE(poisoned.min.has_value());
  EXPECT_FALSE(poisoned.max.has_value());
}

TEST(TraceRecorder, DigestDependsOnDtypeAndBytesAndSeesThroughLayout) {
  const at::Tensor a = at::arange(6, at::kFloat).reshape({2, 3});
  EXPECT_EQ(tensor_digest(a), tensor_digest(a.clone()));
  EXPECT_EQ(tensor_digest(a.t().contiguous()), tensor_digest(a.t()));  // non-contiguous view
  EXPECT_NE(tensor_digest(a), tensor_digest(a.to(at::kDouble)));
  EXPECT_NE(tensor_digest(a), tensor_digest(a + 1e-6));
  EXPECT_EQ(digest_hex(0xabcull), "0x0000000000000abc");
  EXPECT_EQ(dtype_name(at::kBFloat16), "bfloat16");
}

TEST(TraceRecorder, ThreadsGetSmallStableIndicesInOrderOfFirstAppearance) {
  TraceRecorder recorder(0);
  const Owner owner("output_layer");
  auto notify = [&] {
    auto scope = capture_tensor_observations(recorder.callback(), first_wave_kinds());
    observe_tensor(owner, "output_logits", SourceKind::output_logits, at::ones({1}));
  };
  notify();
  std::thread([&] { notify(); }).join();
  notify();
  std::thread([&] { notify(); }).join();
  const auto records = recorder.records();
  ASSERT_EQ(records.size(), 4u);
  EXPECT_EQ(records[0].thread, 0);
  EXPECT_EQ(records[1].thread, 1);
  EXPECT_EQ(records[2].thread, 0);
  // A later thread: a new index, or 1 again when the system reused the first one's id.
  EXPECT_TRUE(records[3].thread == 1 || records[3].thread == 2) << records[3].thread;
}

// What exactly_once reads to see a residual contribution that joined the
// autograd graph or aliases the accumulator (metrics detach their input, so
// only the trace shows it): requires_grad and aliases_accumulator.
TEST(TraceRecorder, FlagsAContributionThatRequiresGradOrAliasesTheAccumulator) {
  TraceRecorder recorder(0);
  const Owner layer("decoder.layers.0");
  const Owner other("decoder.layers.1");
  const at::Tensor accumulator = at::ones({4, 2, 3}).requires_grad_();
  const at::Tensor output = accumulator * 2;
  {
    auto scope = capture_tensor_observations(recorder.callback(), first_wave_kinds());
    ExecutionPointScope point(ExecutionPoint{0, 0, GraphPhase::eager});
    // The real helper: a fresh contribution without autograd.
    observe_layer_residuals(layer, accumulator, output);
    // A contribution computed with autograd on, in place of the accumulator's
    // storage (a view), and a view observed under another layer's name.
    observe_tensor(layer, "residual_accumulator", SourceKind::residual_accumulator, accumulator,
                   std::nullopt, 0, 1);
    observe_tensor(layer, "residual_contribution", SourceKind::residual_contribution,
                   output - accumulator, std::nullopt, 0, 1);
    observe_tensor(layer, "residual_accumulator", SourceKind::residual_accumulator, accumulator,
                   std::nullopt, 0, 1);
    observe_tensor(layer, "residual_contribution", SourceKind::residual_contribution,
                   accumulator.detach().narrow(0, 1, 2), std::nullopt, 0, 1);
    observe_tensor(layer, "residual_accumulator", SourceKind::residual_accumulator, accumulator,
                   std::nullopt, 0, 1);
    observe_tensor(other, "residual_contribution", SourceKind::residual_contribution,
                   accumulator.detach(), std::nullopt, 0, 1);
  }
  const std::vector<TraceRecord> r = recorder.records();
  ASSERT_EQ(r.size(), 8u);
  EXPECT_EQ(r[1].kind, SourceKind::residual_contribution);
  EXPECT_FALSE(r[1].requires_grad);
  EXPECT_FALSE(r[1].aliases_accumulator);
  EXPECT_TRUE(r[3].requires_grad);
  EXPECT_FALSE(r[3].aliases_accumulator);
  EXPECT_FALSE(r[5].requires_grad);
  EXPECT_TRUE(r[5].aliases_accumulator);
  EXPECT_FALSE(r[7].aliases_accumulator) << "another layer's accumulator is not this one's";
  for (int i : {0, 2, 4, 6}) EXPECT_FALSE(r[i].aliases_accumulator) << i;
  const TraceRecord back = trace_record_from_json(nlohmann::json::parse(to_json(r[5]).dump()));
  EXPECT_TRUE(back.aliases_accumulator);
}

TEST(TraceFormat, JsonRoundTripAndKeyOrder) {
  TraceRecord r;
  r.rank = 2;
  r.seq = 7;
  r.step = 1;
  r.microbatch = 0;
  r.phase = GraphPhase::capture;
  r.site = "decoder.layers.0.self_attention.attention_context";
  r.kind = SourceKind::attention_context;
  r.tp_shard_dim = -1;
  r.sequence_dim = 0;
  r.batch_dim = 1;
  r.shape = {8, 2, 16};
  r.dtype = "float64";
  r.grad_mode = true;
  r.requires_grad = true;
  r.thread = 1;
  r.digest = 0xfedcba9876543210ull;
  r.summary.numel = 256;
  r.summary.sum = 0.1;
  r.summary.sum_sq = 1.0 / 3.0;
  r.summary.nan = 256;
  const std::string line = to_json(r).dump();
  EXPECT_EQ(line.rfind(R"({"rank":2,"seq":7,"step":1,"microbatch":0,"phase":"capture","site":)", 0),
            0u)
      << line;
  EXPECT_NE(line.find(R"("min":null,"max":null,"nan":256,"inf":0})"), std::string::npos) << line;
  const TraceRecord back = trace_record_from_json(nlohmann::json::parse(line));
  EXPECT_EQ(to_json(back).dump(), line);
  EXPECT_EQ(back.digest, r.digest);
  EXPECT_EQ(back.summary.sum_sq, r.summary.sum_sq);  // doubles round-trip exactly
}

TEST(TraceFormat, JsonlIsSortedByRankThenSeq) {
  std::vector<TraceRecord> records(4);
  records[0].rank = 1, records[0].seq = 0;
  records[1].rank = 0, records[1].seq = 1;
  records[2].rank = 0, records[2].seq = 0;
  records[3].rank = 1, records[3].seq = 1;
  const std::string text = to_jsonl(records);
  std::vector<std::pair<int, std::int64_t>> order;
  std::size_t begin = 0;
  for (std::size_t nl; (nl = text.find('\n', begin)) != std::string::npos; begin = nl + 1) {
    const auto j = nlohmann::json::parse(text.substr(begin, nl - begin));
    order.emplace_back(j["rank"].get<int>(), j["seq"].get<std::int64_t>());
  }
  EXPECT_EQ(order, (std::vector<std::pair<int, std::int64_t>>{{0, 0}, {0, 1}, {1, 0}, {1, 1}}));
}

}  // namespace
}  // namespace parity
