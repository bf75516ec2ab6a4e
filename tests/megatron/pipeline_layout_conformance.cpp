// parity's pipeline placement (harness/model/pipeline_layout.h) against Megatron
// Core's, read from the JSON tools/megatron/layer_offsets.py writes (label
// `megatron`, tool_live.sh layer_offsets.py). parity must accept exactly the
// configurations where Megatron raises nothing, builds every decoder layer and
// MTP depth exactly once, and runs a single model chunk when pp is 1 (its
// no-pipelining schedule asserts it); and for those it must give every
// chunk's offset, layer count, embedding / loss placement, MTP placement and
// MTP layer numbers as Megatron does. Layout strings must parse alike.
// Usage: pipeline_layout_conformance MEGATRON.json; exit 0 all equal, 1 not.
#include <cstdio>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/model/pipeline_layout.h"
#include "tests/megatron/conformance.h"

namespace {

using nlohmann::json;
using parity::PipelineLayoutConfig;

using parity::conformance::fail;

PipelineLayoutConfig config_of(const json& c) {
  PipelineLayoutConfig p;
  p.num_layers = c.at("layers").get<int>();
  p.pp = c.at("pp").get<int>();
  p.vpp = c.at("vpp").get<int>();
  if (!c.at("pp-first-layers").is_null()) p.first_stage_layers = c.at("pp-first-layers").get<int>();
  if (!c.at("pp-last-layers").is_null()) p.last_stage_layers = c.at("pp-last-layers").get<int>();
  p.account_for_embedding = c.at("pp-account-embedding").get<bool>();
  p.account_for_loss = c.at("pp-account-loss").get<bool>();
  p.layout = c.at("pp-layout").get<std::string>();
  p.mtp_layers = c.at("mtp-layers").get<int>();
  return p;
}

// Megatron's answers build each decoder layer and each MTP depth exactly once.
bool is_partition(const json& m, int num_layers, int mtp_layers) {
  std::vector<int> built(static_cast<std::size_t>(num_layers), 0);
  int mtp = 0;
  for (const json& ch : m.at("chunks")) {
    const int offset = ch.at("offset").get<int>(), count = ch.at("count").get<int>();
    if (count < 0) return false;
    for (int l = offset; l < offset + count; ++l) {
      if (l < 0 || l >= num_layers || built[static_cast<std::size_t>(l)]++ > 0) return false;
    }
    mtp += ch.at("mtp_count").get<int>();
  }
  for (int b : built)
    if (b != 1) return false;
  return mtp == mtp_layers;
}

std::string layout_text(const std::vector<std::vector<parity::LayoutLayer>>& stages) {
  json out = json::array();
  for (const auto& stage : stages) {
    std::string s;
    for (parity::LayoutLayer l : stage)
      s += l == parity::LayoutLayer::embedding ? 'E'
           : l == parity::LayoutLayer::decoder ? 't'
           : l == parity::LayoutLayer::mtp     ? 'm'
                                               : 'L';
    out.push_back(s);
  }
  return out.dump();
}

void compare_parses(const json& parses) {
  for (const json& p : parses) {
    const std::string text = p.at("text").get<std::string>();
    std::string error;
    auto parsed = parity::parse_pipeline_layout(text, &error);
    if (p.contains("error")) {
      if (parsed)
        fail("layout '" + text + "': Megatron rejects it (" + p.at("error").get<std::string>() +
             "), parity parses " + layout_text(*parsed));
    } else if (!parsed) {
      fail("layout '" + text + "': Megatron parses " + p.at("stages").dump() +
           ", parity: " + error);
    } else if (layout_text(*parsed) != p.at("stages").dump()) {
      fail("layout '" + text + "': Megatron " + p.at("stages").dump() + ", parity " +
           layout_text(*parsed));
    }
  }
}

template <typename T>
void expect_eq(const std::string& where, const char* what, const T& parity, const T& megatron) {
  if (parity == megatron) return;
  std::ostringstream s;
  s << where << ": " << what << ": parity " << parity << ", Megatron " << megatron;
  fail(s.str());
}

std::string ints(const std::vector<int>& v) { return json(v).dump(); }

// Returns the number of chunks compared.
int compare_case(const json& c) {
  const json& config = c.at("config");
  const json& m = c.at("megatron");
  const PipelineLayoutConfig p = config_of(config);
  const std::string where = config.dump();
  const auto violations = parity::validate_pipeline_layout(p);
  const bool megatron_accepts = m.at("accepted").get<bool>();
  const bool expected = megatron_accepts && is_partition(m, p.num_layers, p.mtp_layers) &&
                        !(p.pp == 1 && m.at("vpp").get<int>() > 1);
  if (expected != violations.empty()) {
    std::string why = megatron_accepts ? "Megatron accepts it" : m.at("error").get<std::string>();
    if (megatron_accepts && !expected) why += " but its placement is not usable";
    fail(where + ": parity " +
         (violations.empty()
              ? std::string("accepts")
              : "rejects (" + violations.front().field + " = " + violations.front().value + ": " +
                    violations.front().rule + ")") +
         "; Megatron: " + why);
    return 0;
  }
  if (!expected) return 0;
  const int vpp = parity::virtual_stages(p);
  expect_eq(where, "vpp", vpp, m.at("vpp").get<int>());
  std::set<int> parity_mtp_ranks;
  if (auto chunk = parity::mtp_chunk(p)) parity_mtp_ranks.insert(chunk->pp_rank);
  expect_eq(where, "mtp ranks", ints({parity_mtp_ranks.begin(), parity_mtp_ranks.end()}),
            m.at("mtp_ranks").dump());
  expect_eq(where, "mtp_standalone", parity::mtp_standalone(p), m.at("mtp_standalone").get<bool>());
  int compared = 0;
  for (const json& ch : m.at("chunks")) {
    const int pp_rank = ch.at("pp_rank").get<int>(), vp = ch.at("vp_stage").get<int>();
    const std::string at =
        where + " (pp_rank " + std::to_string(pp_rank) + ", vp_stage " + std::to_string(vp) + ")";
    expect_eq(at, "layer offset", parity::layer_offset(p, vp, pp_rank), ch.at("offset").get<int>());
    expect_eq(at, "layers to build", parity::num_layers_to_build(p, vp, pp_rank),
              ch.at("count").get<int>());
    const parity::ChunkId id{pp_rank, vp};
    expect_eq(at, "embedding here", parity::embedding_chunk(p) == id,
              ch.at("pre_process").get<bool>());
    expect_eq(at, "loss here", parity::loss_chunk(p) == id, ch.at("post_process").get<bool>());
    expect_eq(at, "mtp offset", parity::mtp_layer_offset(p, vp, pp_rank),
              ch.at("mtp_offset").get<int>());
    const int mtp = parity::num_mtp_layers_to_build(p, vp, pp_rank);
    expect_eq(at, "mtp layers to build", mtp, ch.at("mtp_count").get<int>());
    // Megatron's layer_number is 1-based, parity's numbers 0-based.
    std::vector<int> depth, inner;
    for (int d = 0; d < mtp; ++d) {
      depth.push_back(parity::mtp_depth_number(p, vp, pp_rank, d) + 1);
      inner.push_back(parity::mtp_transformer_layer_number(p, vp, pp_rank, d) + 1);
    }
    expect_eq(at, "mtp layer numbers", ints(depth), ch.at("mtp_layer_numbers").dump());
    expect_eq(at, "mtp transformer layer numbers", ints(inner),
              ch.at("mtp_transformer_layer_numbers").dump());
    ++compared;
  }
  return compared;
}

}  // namespace

namespace parity::conformance {

Summary compare(const json& megatron) {
  compare_parses(megatron.at("parses"));
  int accepted = 0, chunks = 0;
  const json& cases = megatron.at("cases");
  for (const json& c : cases) {
    const int compared = compare_case(c);
    chunks += compared;
    accepted += compared > 0;
  }
  // The grid must reach the accepted branches, or nothing above compared answers.
  if (accepted < 100) fail("only " + std::to_string(accepted) + " configurations accepted by both");
  std::ostringstream counts;
  counts << cases.size() << " configurations, " << accepted << " accepted by both (" << chunks
         << " chunks compared), " << megatron.at("parses").size() << " layout strings";
  return {"pipeline layout", counts.str()};
}

}  // namespace parity::conformance
