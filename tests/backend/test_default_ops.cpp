// Backend's coarser ops keep today's composition by default (default_ops.cpp):
// on one rank they equal the plain pieces they replace.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>

#include "harness/backend/registry.h"

namespace parity {
namespace {

TEST(BackendDefaultOps, SplitQkvFollowsMegatronsPerHeadLayout) {
  auto backend = make_backend("reference");
  const std::int64_t s = 3, b = 2, np = 2, hn = 4;
  const at::Tensor mixed = at::arange(s * b * np * 3 * hn, at::kDouble).view({s, b, np * 3 * hn});
  const std::vector<at::Tensor> qkv = backend->split_qkv(mixed, hn, np);
  ASSERT_EQ(qkv.size(), 3u);
  const at::Tensor heads = mixed.view({s, b, np, 3 * hn});
  for (std::int64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(qkv[static_cast<size_t>(i)].sizes(), (std::vector<std::int64_t>{s, b, np, hn}));
    EXPECT_TRUE(at::equal(qkv[static_cast<size_t>(i)], heads.slice(-1, i * hn, (i + 1) * hn)));
  }
}

// Grouped-query attention: per group g its queries q(g*r) .. q(g*r+r-1), then
// k(g), then v(g) (Megatron's get_query_key_value_tensors), r = np / ng.
TEST(BackendDefaultOps, SplitQkvFollowsMegatronsGroupedLayout) {
  auto backend = make_backend("reference");
  const std::int64_t s = 2, b = 3, np = 6, ng = 2, r = np / ng, hn = 2;
  const at::Tensor mixed =
      at::arange(s * b * (np + 2 * ng) * hn, at::kDouble).view({s, b, (np + 2 * ng) * hn});
  const std::vector<at::Tensor> qkv = backend->split_qkv(mixed, hn, ng);
  ASSERT_EQ(qkv.size(), 3u);
  EXPECT_EQ(qkv[0].sizes(), (std::vector<std::int64_t>{s, b, np, hn}));
  EXPECT_EQ(qkv[1].sizes(), (std::vector<std::int64_t>{s, b, ng, hn}));
  EXPECT_EQ(qkv[2].sizes(), (std::vector<std::int64_t>{s, b, ng, hn}));
  // Column offsets of each head's hn values in the mixed tensor's last dim.
  auto columns = [&](std::int64_t start) { return mixed.slice(-1, start, start + hn); };
  for (std::int64_t g = 0; g < ng; ++g) {
    const std::int64_t base = g * (r + 2) * hn;
    for (std::int64_t j = 0; j < r; ++j)
      EXPECT_TRUE(at::equal(qkv[0].select(2, g * r + j), columns(base + j * hn))) << g << " " << j;
    EXPECT_TRUE(at::equal(qkv[1].select(2, g), columns(base + r * hn))) << g;
    EXPECT_TRUE(at::equal(qkv[2].select(2, g), columns(base + (r + 1) * hn))) << g;
  }
}

TEST(BackendDefaultOps, VocabParallelEmbeddingZeroesIdsOutsideThisRanksRows) {
  auto backend = make_backend("reference");
  const at::Tensor weight = at::arange(4 * 3, at::kDouble).view({4, 3}) + 1;  // rows 10..13
  const at::Tensor ids = at::tensor({9, 10, 13, 14}, at::kLong).view({2, 2});
  const at::Tensor out = backend->vocab_parallel_embedding(ids, weight, 10, nullptr);
  ASSERT_EQ(out.sizes(), (std::vector<std::int64_t>{2, 2, 3}));
  EXPECT_TRUE(at::equal(out[0][0], at::zeros({3}, at::kDouble)));
  EXPECT_TRUE(at::equal(out[0][1], weight[0]));
  EXPECT_TRUE(at::equal(out[1][0], weight[3]));
  EXPECT_TRUE(at::equal(out[1][1], at::zeros({3}, at::kDouble)));
}

TEST(BackendDefaultOps, CrossEntropyOnFullLogitsIsLogSoftmaxsNegativeTarget) {
  auto backend = make_backend("reference");
  const at::Tensor logits = at::linspace(-2.0, 3.0, 2 * 3 * 5, at::kDouble).view({2, 3, 5});
  const at::Tensor labels = at::tensor({0, 4, 2, 1, 3, 0}, at::kLong).view({2, 3});
  const at::Tensor loss = backend->vocab_parallel_cross_entropy(logits, labels, 0, nullptr);
  const at::Tensor expect =
      -at::log_softmax(logits, -1).gather(-1, labels.unsqueeze(-1)).squeeze(-1);
  EXPECT_TRUE(at::allclose(loss, expect, 1e-12, 1e-12));
}

// Megatron's rotary embedding, pair by pair: pair i turns by pos * base^(-2i/d)
// (fp32 angles). dim 3 of 6 channels: Megatron's arange(0, 3, 2) = {0, 2} gives
// two frequencies, so 4 channels rotate and 2 pass through unchanged; pairs are
// (0, 2), (1, 3) by halves or (0, 1), (2, 3) interleaved.
TEST(BackendDefaultOps, RotaryEmbeddingFollowsMegatronsPercentAndInterleavedLayouts) {
  auto backend = make_backend("reference");
  const std::int64_t s = 3, hn = 6;
  const at::Tensor x = at::linspace(-1.0, 2.0, s * 2 * hn, at::kDouble).view({s, 1, 2, hn});
  const at::Tensor pos = at::tensor({0, 5, 11}, at::kLong);
  const double base = 500.0;
  for (const bool interleaved : {false, true}) {
    const at::Tensor out = backend->rotary_embedding(x, pos, RotarySpec{base, 3, interleaved});
    ASSERT_EQ(out.sizes(), x.sizes());
    for (std::int64_t t = 0; t < s; ++t) {
      for (std::int64_t i = 0; i < 2; ++i) {
        const double angle = static_cast<double>(pos[t].item<std::int64_t>()) *
                             std::pow(base, -2.0 * static_cast<double>(i) / 3.0);
        const std::int64_t a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + 2;
        const at::Tensor xa = x[t].select(-1, a), xb = x[t].select(-1, b);
        EXPECT_TRUE(at::allclose(out[t].select(-1, a), xa * std::cos(angle) - xb * std::sin(angle),
                                 1e-5, 1e-5))
            << interleaved << " " << t << " " << i;
        EXPECT_TRUE(at::allclose(out[t].select(-1, b), xb * std::cos(angle) + xa * std::sin(angle),
                                 1e-5, 1e-5))
            << interleaved << " " << t << " " << i;
      }
    }
    EXPECT_TRUE(at::equal(out.narrow(-1, 4, 2), x.narrow(-1, 4, 2))) << interleaved;
    EXPECT_TRUE(at::equal(out[0], x[0])) << interleaved;  // position 0 turns by nothing
  }
  // dim 0 (all channels) is rotary_percent 1.0: all 6 rotate.
  const at::Tensor all = backend->rotary_embedding(x, pos, RotarySpec{base, 0, false});
  EXPECT_FALSE(at::allclose(all.narrow(-1, 4, 2), x.narrow(-1, 4, 2)));
}

}  // namespace
}  // namespace parity
