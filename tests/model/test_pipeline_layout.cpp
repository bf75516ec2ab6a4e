// Pipeline layer placement (harness/model/pipeline_layout.h): hand-worked
// placements for every mode of Megatron's get_transformer_layer_offset /
// get_num_layers_to_build, the layout grammar, MTP placement and numbering,
// and every rejection. Megatron itself, live, is compared in the `megatron`
// label (tests/megatron/pipeline_layout_conformance.cpp).
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "harness/model/pipeline_layout.h"

namespace parity {
namespace {

PipelineLayoutConfig cfg(int layers, int pp, int vpp = 1) {
  PipelineLayoutConfig c;
  c.num_layers = layers;
  c.pp = pp;
  c.vpp = vpp;
  return c;
}

PipelineLayoutConfig with_layout(int layers, int pp, const std::string& layout, int mtp = 0) {
  PipelineLayoutConfig c = cfg(layers, pp);
  c.layout = layout;
  c.mtp_layers = mtp;
  return c;
}

// placement[pp_rank][vp_stage] = the chunk's global layers.
using Placement = std::vector<std::vector<std::vector<int>>>;
Placement placement(const PipelineLayoutConfig& c) {
  const auto violations = validate_pipeline_layout(c);
  EXPECT_TRUE(violations.empty()) << violations.front().field << " = " << violations.front().value
                                  << ": " << violations.front().rule;
  Placement out(static_cast<std::size_t>(c.pp));
  for (int p = 0; p < c.pp; ++p)
    for (int v = 0; v < virtual_stages(c); ++v) {
      out[p].push_back(chunk_layers(c, v, p));
      EXPECT_EQ(num_layers_to_build(c, v, p), static_cast<int>(out[p].back().size()));
      if (!out[p].back().empty()) {
        EXPECT_EQ(layer_offset(c, v, p), out[p].back().front());
      }
      for (int l : out[p].back()) EXPECT_EQ(chunk_of_layer(c, l), (ChunkId{p, v}));
    }
  return out;
}

// The first violation as "field: rule" (empty when none).
std::string rejection(const PipelineLayoutConfig& c) {
  const auto v = validate_pipeline_layout(c);
  return v.empty() ? "" : v.front().field + ": " + v.front().rule;
}

#define EXPECT_REJECTED(config, field, rule_part)                    \
  do {                                                               \
    const std::string got = rejection(config);                       \
    EXPECT_EQ(got.rfind(std::string(field) + ": ", 0), 0u) << got;   \
    EXPECT_NE(got.find(rule_part), std::string::npos) << got;        \
    EXPECT_THROW(layer_offset(config, 0, 0), std::invalid_argument); \
  } while (0)

TEST(PipelineLayout, EvenSplit) {
  EXPECT_EQ(placement(cfg(8, 4)), (Placement{{{0, 1}}, {{2, 3}}, {{4, 5}}, {{6, 7}}}));
  EXPECT_EQ(placement(cfg(3, 1)), (Placement{{{0, 1, 2}}}));
  // Megatron's get_num_layers_to_build comment: 8 layers, 2 stages, 2 or 4 chunks.
  EXPECT_EQ(placement(cfg(8, 2, 2)), (Placement{{{0, 1}, {4, 5}}, {{2, 3}, {6, 7}}}));
  EXPECT_EQ(placement(cfg(8, 2, 4)), (Placement{{{0}, {2}, {4}, {6}}, {{1}, {3}, {5}, {7}}}));
}

TEST(PipelineLayout, EmbeddingAndLossCountedAsLayers) {
  PipelineLayoutConfig both = cfg(6, 4);
  both.account_for_embedding = both.account_for_loss = true;  // 8 slots, 2 per stage
  EXPECT_EQ(placement(both), (Placement{{{0}}, {{1, 2}}, {{3, 4}}, {{5}}}));
  both.pp = 2;
  both.vpp = 2;  // 4 slots per stage, 2 per chunk
  EXPECT_EQ(placement(both), (Placement{{{0}, {3, 4}}, {{1, 2}, {5}}}));
  PipelineLayoutConfig embedding = cfg(7, 2);
  embedding.account_for_embedding = true;
  EXPECT_EQ(placement(embedding), (Placement{{{0, 1, 2}}, {{3, 4, 5, 6}}}));
  PipelineLayoutConfig loss = cfg(1, 2);
  loss.account_for_loss = true;  // the last stage holds the loss only
  EXPECT_EQ(placement(loss), (Placement{{{0}}, {{}}}));
  EXPECT_EQ(layer_offset(loss, 0, 1), 1);
}

TEST(PipelineLayout, UnevenFirstAndLastStages) {
  PipelineLayoutConfig c = cfg(10, 4);
  c.first_stage_layers = 1;
  c.last_stage_layers = 3;  // 6 middle layers over 2 middle stages
  EXPECT_EQ(placement(c), (Placement{{{0}}, {{1, 2, 3}}, {{4, 5, 6}}, {{7, 8, 9}}}));
  PipelineLayoutConfig last = cfg(8, 3);
  last.last_stage_layers = 2;
  EXPECT_EQ(placement(last), (Placement{{{0, 1, 2}}, {{3, 4, 5}}, {{6, 7}}}));
  PipelineLayoutConfig first = cfg(5, 2);
  first.first_stage_layers = 1;
  EXPECT_EQ(placement(first), (Placement{{{0}}, {{1, 2, 3, 4}}}));
  // Interleaved: per chunk 0 (first), 4 / 2 stages (middle), 1 (last); 5 per round.
  last = cfg(10, 3, 2);
  last.last_stage_layers = 2;
  EXPECT_EQ(placement(last), (Placement{{{0, 1}, {5, 6}}, {{2, 3}, {7, 8}}, {{4}, {9}}}));
  // Interleaved with both: per chunk 1 (first), 2 / 2 stages (middle), 2 (last).
  PipelineLayoutConfig both = cfg(10, 4, 2);
  both.first_stage_layers = 2;
  both.last_stage_layers = 4;
  EXPECT_EQ(placement(both), (Placement{{{0}, {5}}, {{1}, {6}}, {{2}, {7}}, {{3, 4}, {8, 9}}}));
  // One stage holding every layer is its own first stage.
  first = cfg(4, 1);
  first.first_stage_layers = 4;
  EXPECT_EQ(placement(first), (Placement{{{0, 1, 2, 3}}}));
}

TEST(PipelineLayout, LayoutString) {
  EXPECT_EQ(placement(with_layout(8, 3, "Et*3|t*3|t*2L")),
            (Placement{{{0, 1, 2}}, {{3, 4, 5}}, {{6, 7}}}));
  // 4 stages over pp 2: two chunks per stage, the layout's own vpp.
  const PipelineLayoutConfig interleaved = with_layout(5, 2, "Et|(tt|)*2L");
  EXPECT_EQ(virtual_stages(interleaved), 2);
  EXPECT_EQ(placement(interleaved), (Placement{{{0}, {3, 4}}, {{1, 2}, {}}}));
  EXPECT_EQ(layer_offset(interleaved, 1, 1), 5);  // an empty chunk starts after everything
  PipelineLayoutConfig given = interleaved;
  given.vpp = 2;  // the same count given explicitly
  EXPECT_EQ(placement(given), placement(interleaved));
  // Commas are cosmetic; empty chunks build nothing.
  EXPECT_EQ(placement(with_layout(4, 2, "E,t,t|t,t,L")), (Placement{{{0, 1}}, {{2, 3}}}));
  EXPECT_EQ(placement(with_layout(2, 3, "E||ttL")), (Placement{{{}}, {{}}, {{0, 1}}}));
  // pp 1 with a single chunk: Megatron's offset is 0, the count the chunk's t's.
  EXPECT_EQ(placement(with_layout(2, 1, "EttL")), (Placement{{{0, 1}}}));
}

std::vector<std::string> parsed(const std::string& text) {
  std::string error;
  auto layout = parse_pipeline_layout(text, &error);
  if (!layout) return {"error: " + error};
  std::vector<std::string> out;
  for (const auto& stage : *layout) {
    std::string s;
    for (LayoutLayer l : stage)
      s += l == LayoutLayer::embedding ? 'E'
           : l == LayoutLayer::decoder ? 't'
           : l == LayoutLayer::mtp     ? 'm'
                                       : 'L';
    out.push_back(s);
  }
  return out;
}

TEST(PipelineLayout, LayoutGrammar) {
  using V = std::vector<std::string>;
  EXPECT_EQ(parsed("Ettt|(tt|)*2,m|L"), (V{"Ettt", "tt", "tt", "m", "L"}));
  EXPECT_EQ(parsed("E|(tt|)*2,(t|)*4,mL"), (V{"E", "tt", "tt", "t", "t", "t", "t", "mL"}));
  EXPECT_EQ(parsed("E(t)*3|t*12L").at(1), std::string(12, 't') + "L");
  EXPECT_EQ(parsed("Et*0|L"), (V{"E", "L"}));
  EXPECT_EQ(parsed("(|t)*2,L"), (V{"", "t", "tL"}));
  EXPECT_EQ(parsed("|"), (V{"", ""}));
  // (...)*n is unrolled before x*n, each in one pass: inner groups and a second
  // factor survive as characters Megatron rejects.
  EXPECT_EQ(parsed("(t*2)*2").front(), "tttt");
  EXPECT_EQ(parsed("E((t)*2|)*2L").front().rfind("error: invalid layer character '('", 0), 0u);
  EXPECT_EQ(parsed("Et*2*2|L").front(),
            "error: invalid layer character '*' in stage 0 (known: "
            "E, t, m, L, '|')");
  EXPECT_EQ(parsed("Et|t)*2L").front().rfind("error: invalid layer character ')' in stage 1", 0),
            0u);
  EXPECT_EQ(parsed("Et|t L").front().rfind("error: invalid layer character ' '", 0), 0u);
  EXPECT_EQ(parsed("Et|t\x01L").front().rfind("error: invalid layer character '\\x01'", 0), 0u);
  EXPECT_EQ(parsed("Et*2000000|L").front(), "error: expands to more than 1000000 characters");
  EXPECT_EQ(parsed("(tttttttttt)*200000").front(),
            "error: expands to more than 1000000 characters");
}

TEST(PipelineLayout, EmbeddingLossAndMtpPlacement) {
  PipelineLayoutConfig c = cfg(8, 2, 2);
  c.mtp_layers = 2;
  EXPECT_EQ(embedding_chunk(c), (ChunkId{0, 0}));
  EXPECT_EQ(loss_chunk(c), (ChunkId{1, 1}));
  EXPECT_EQ(mtp_chunk(c), (ChunkId{1, 1}));
  EXPECT_FALSE(mtp_standalone(c));
  EXPECT_EQ(num_mtp_layers_to_build(c, 1, 1), 2);
  EXPECT_EQ(num_mtp_layers_to_build(c, 0, 1), 0);
  EXPECT_EQ(num_mtp_layers_to_build(c, 1, 0), 0);
  // Megatron: MTP layer_number 1, 2; their transformer layers 9, 10 (1-based),
  // so the MoE tracker's vector holds 8 + 2 entries and depth 0 is entry 8.
  EXPECT_EQ(mtp_depth_number(c, 1, 1, 0), 0);
  EXPECT_EQ(mtp_depth_number(c, 1, 1, 1), 1);
  EXPECT_EQ(mtp_transformer_layer_number(c, 1, 1, 0), 8);
  EXPECT_EQ(mtp_transformer_layer_number(c, 1, 1, 1), 9);
  EXPECT_EQ(moe_tracker_layers(c), 10);
  EXPECT_THROW(mtp_depth_number(c, 0, 1, 0), std::out_of_range);
  EXPECT_FALSE(mtp_chunk(cfg(4, 2)).has_value());

  // A layout puts the depths where its m's are; on a stage before the last
  // that is Megatron's "standalone" MTP. E and L are built on the first and
  // last chunk whatever the string says.
  const PipelineLayoutConfig standalone = with_layout(3, 4, "Et|t|tm|L", 1);
  EXPECT_EQ(mtp_chunk(standalone), (ChunkId{2, 0}));
  EXPECT_TRUE(mtp_standalone(standalone));
  EXPECT_EQ(mtp_transformer_layer_number(standalone, 0, 2, 0), 3);
  const PipelineLayoutConfig leading_empty = with_layout(2, 3, "|Et|tL");
  EXPECT_EQ(embedding_chunk(leading_empty), (ChunkId{0, 0}));
  EXPECT_EQ(loss_chunk(leading_empty), (ChunkId{2, 0}));
  EXPECT_EQ(placement(leading_empty), (Placement{{{}}, {{0}}, {{1}}}));
}

TEST(PipelineLayout, RejectsBadBasics) {
  EXPECT_REJECTED(cfg(0, 1), "layers", "must be at least 1");
  EXPECT_REJECTED(cfg(4, 0), "pp", "must be at least 1");
  EXPECT_REJECTED(cfg(4, 2, 0), "vpp", "must be at least 1");
  PipelineLayoutConfig mtp = cfg(4, 2);
  mtp.mtp_layers = -1;
  EXPECT_REJECTED(mtp, "mtp-layers", "must be at least 0");
  EXPECT_REJECTED(cfg(4, 1, 2), "vpp", "more than one model chunk per stage needs pp > 1");
  EXPECT_REJECTED(with_layout(2, 1, "Et|tL"), "pp-layout", "needs pp > 1");
  // Valid configurations, out-of-range chunks.
  EXPECT_THROW(layer_offset(cfg(4, 2), 0, 2), std::out_of_range);
  EXPECT_THROW(num_layers_to_build(cfg(4, 2), 1, 0), std::out_of_range);
  EXPECT_THROW(chunk_of_layer(cfg(4, 2), 4), std::out_of_range);
}

TEST(PipelineLayout, RejectsConflictingOptions) {
  PipelineLayoutConfig c = cfg(4, 2);
  c.first_stage_layers = 2;
  c.account_for_embedding = true;
  EXPECT_REJECTED(c, "pp-first-layers", "cannot be combined with pp-account-embedding");
  c = cfg(4, 2);
  c.last_stage_layers = 2;
  c.account_for_loss = true;
  EXPECT_REJECTED(c, "pp-last-layers", "cannot be combined with pp-account-loss");
  for (int option = 0; option < 4; ++option) {
    c = with_layout(4, 2, "Ett|ttL");
    if (option == 0) c.first_stage_layers = 2;
    if (option == 1) c.last_stage_layers = 2;
    if (option == 2) c.account_for_embedding = true;
    if (option == 3) c.account_for_loss = true;
    EXPECT_REJECTED(c, "pp-layout", "cannot be combined with");
  }
}

TEST(PipelineLayout, RejectsBadLayouts) {
  EXPECT_REJECTED(with_layout(2, 2, "Et|tX"), "pp-layout", "invalid layer character 'X'");
  EXPECT_REJECTED(with_layout(2, 2, "Et|t|L"), "pp-layout", "3 stages are not divisible by pp 2");
  PipelineLayoutConfig vpp = with_layout(5, 2, "Et|(tt|)*2L");
  vpp.vpp = 3;
  EXPECT_REJECTED(vpp, "vpp", "the layout has 2 model chunks per stage");
  EXPECT_REJECTED(with_layout(1, 2, "|"), "pp-layout", "the first layer must be E");
  EXPECT_REJECTED(with_layout(2, 2, "tE|tL"), "pp-layout", "the first layer must be E");
  EXPECT_REJECTED(with_layout(2, 2, "Et|Lt"), "pp-layout", "the last layer must be L");
  EXPECT_REJECTED(with_layout(2, 2, "EEt|tL"), "pp-layout", "E must appear exactly once");
  EXPECT_REJECTED(with_layout(2, 2, "Et|tLL"), "pp-layout", "L must appear exactly once");
  EXPECT_REJECTED(with_layout(3, 2, "Et|tL"), "pp-layout",
                  "holds 2 decoder layers (t), layers is 3");
  EXPECT_REJECTED(with_layout(2, 2, "Et|tmL", 2), "pp-layout",
                  "holds 1 MTP layers (m), mtp-layers is 2");
  EXPECT_REJECTED(with_layout(2, 2, "Et|tmL"), "pp-layout",
                  "holds 1 MTP layers (m), mtp-layers is 0");
  EXPECT_REJECTED(with_layout(4, 2, "Etm|t|t|tL", 1), "pp-layout",
                  "decoder layers (t) must come before the MTP layers (m)");
  EXPECT_REJECTED(
      with_layout(2, 2, "Et|tm|L|", 1), "pp-layout",
      "MTP layers (m) must be in a stage's last model chunk (stage 1 has them in chunk 0)");
  EXPECT_REJECTED(with_layout(1, 2, "Etm|mL", 2), "pp-layout",
                  "all MTP layers (m) must be in one model chunk (stage 0 holds 1 of 2)");
}

TEST(PipelineLayout, RejectsUnevenStagesThatDoNotFit) {
  auto uneven = [](int layers, int pp, int vpp, std::optional<int> first, std::optional<int> last) {
    PipelineLayoutConfig c = cfg(layers, pp, vpp);
    c.first_stage_layers = first;
    c.last_stage_layers = last;
    return c;
  };
  EXPECT_REJECTED(uneven(4, 2, 1, 0, {}), "pp-first-layers", "must be larger than 0");
  EXPECT_REJECTED(uneven(4, 2, 1, {}, -1), "pp-last-layers", "must be larger than 0");
  EXPECT_REJECTED(uneven(8, 2, 2, 3, {}), "pp-first-layers",
                  "the first stage's layers must be divisible by vpp 2");
  EXPECT_REJECTED(uneven(8, 2, 2, {}, 1), "pp-last-layers",
                  "the last stage's layers must be divisible by vpp 2");
  EXPECT_REJECTED(uneven(4, 3, 1, 2, 2), "pp-first-layers",
                  "0 layers remain for 1 middle stages (either both or neither must be 0)");
  EXPECT_REJECTED(uneven(5, 2, 1, 2, 2), "pp-first-layers", "1 layers remain for 0 middle stages");
  EXPECT_REJECTED(uneven(7, 4, 1, 2, {}), "pp-first-layers",
                  "the 5 middle layers are not divisible by the 3 middle stages");
  EXPECT_REJECTED(uneven(6, 4, 2, 2, 2), "vpp",
                  "the 1 layers of each middle stage are not divisible by vpp 2");
  // Accepted by Megatron's checks, but its placement builds -1 layers on the first stage.
  EXPECT_REJECTED(uneven(1, 2, 1, {}, 2), "pp-last-layers",
                  "Megatron builds a negative number of layers on stage 0 chunk 0");
  // Accepted by Megatron's checks; its offset divides by zero middle stages.
  EXPECT_REJECTED(uneven(4, 2, 2, 2, 2), "pp-first-layers",
                  "divides by the number of middle stages, 0 here");
  // pp 1 with both set: Megatron builds the last stage's count on the one stage.
  EXPECT_REJECTED(uneven(4, 1, 1, 2, 1), "pp-first-layers", "Megatron builds layer 1 on no stage");
}

TEST(PipelineLayout, RejectsEvenSplitsThatDoNotDivide) {
  EXPECT_REJECTED(cfg(6, 4), "layers", "6 layers are not divisible by pp 4");
  EXPECT_REJECTED(cfg(6, 2, 2), "vpp", "the 3 layers of each stage are not divisible by vpp 2");
  PipelineLayoutConfig c = cfg(6, 4);
  c.account_for_embedding = true;
  EXPECT_REJECTED(c, "layers",
                  "7 layers (the embedding / loss counted as layers) are not divisible by pp 4");
  c = cfg(4, 2, 2);
  c.account_for_loss = true;  // 5 slots
  EXPECT_REJECTED(c, "layers", "5 layers (the embedding / loss counted as layers)");
  c = cfg(4, 2, 4);
  c.account_for_embedding = c.account_for_loss = true;  // 3 per stage
  EXPECT_REJECTED(c, "vpp", "the 3 layers of each stage (the embedding / loss counted as layers)");
}

TEST(PipelineLayout, ScheduleMicrobatches) {
  EXPECT_TRUE(validate_pipeline_schedule(1, 1, 1).empty());
  EXPECT_TRUE(validate_pipeline_schedule(4, 1, 3).empty());  // 1F1B takes any count
  EXPECT_TRUE(validate_pipeline_schedule(2, 2, 4).empty());
  auto rule = [](int pp, int vpp, int microbatches) {
    const auto v = validate_pipeline_schedule(pp, vpp, microbatches);
    return v.empty() ? std::string()
                     : v.front().field + " = " + v.front().value + ": " + v.front().rule;
  };
  EXPECT_EQ(rule(2, 1, 0), "microbatches = 0: must be at least 1");
  EXPECT_EQ(rule(1, 2, 4), "vpp = 2: more than one model chunk per stage needs pp > 1");
  EXPECT_EQ(
      rule(4, 2, 2),
      "microbatches = 2: the interleaved schedule (vpp 2) needs at least pp = 4 microbatches");
  EXPECT_EQ(
      rule(2, 2, 5),
      "microbatches = 5: the interleaved schedule (vpp 2) needs a multiple of pp 2 microbatches");
}

}  // namespace
}  // namespace parity
