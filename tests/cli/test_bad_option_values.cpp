// Every run option given a bad value: exit 2, one line naming the flag (a field without
// a case fails), and mutants' own options' ranges.
#include <gtest/gtest.h>

#include <algorithm>

#include "harness/cli/cli.h"
#include "harness/config/run_config_fields.h"
#include "tests/support/command_line.h"

namespace parity::cli {
namespace {

using testing::parse_parity;
using testing::run_parity;

struct BadValue {
  std::string flag;               // "--tp"
  std::vector<std::string> args;  // the command-line words after the command
};

void PrintTo(const BadValue& b, std::ostream* os) {
  *os << b.flag;
  for (const std::string& a : b.args) *os << " " << a;
}

// One bad value per run option; the test below fails when a field has none.
std::vector<BadValue> bad_values() {
  auto one = [](std::string flag, std::string value) {
    return BadValue{"--" + flag, {"--" + flag, value}};
  };
  return {
      one("tp", "0"),
      one("cp", "-2"),
      one("dp", "two"),
      {"--ep", {"--ep", "3", "--dp", "2"}},  // must divide cp*dp
      one("etp", "-1"),
      {"--sp", {"--sp=maybe"}},
      one("launch", "mpi"),
      one("backend", "cuda-nope"),
      one("seed", "-5"),
      one("timeout", "-1"),
      one("report", "/nonexistent-parity-dir/r.json"),
      one("inject", "boom"),
      {"--check-collectives", {"--check-collectives=maybe"}},
      one("hidden", "0"),
      one("heads", "-1"),
      one("num-query-groups", "3"),  // must divide heads (4)
      one("kv-channels", "-2"),
      {"--qk-layernorm", {"--qk-layernorm=maybe"}},
      one("ffn-hidden", "0"),
      one("layers", "0"),
      one("seq", "0"),
      one("packed-seq-lengths", "5,x"),
      one("micro-batch", "0"),
      one("microbatches", "0"),
      one("steps", "0"),
      one("eval-every", "-1"),
      one("vocab", "1.5"),
      one("dtype", "fp16"),
      {"--fp32-residual", {"--fp32-residual=maybe"}},
      one("dropout", "1.5"),
      one("norm", "batchnorm"),
      one("activation", "relu"),
      one("position-embedding", "alibi"),
      one("rotary-base", "0"),
      {"--rotary-percent", {"--position-embedding", "rope", "--rotary-percent", "1.5"}},
      {"--rotary-interleaved", {"--rotary-interleaved"}},  // needs rope
      one("norm-epsilon", "-1e-5"),
      {"--untie", {"--untie=maybe"}},
      {"--bias-linear", {"--bias-linear=maybe"}},
      one("recompute", "partial"),
      one("recompute-layers", "0"),
      one("graphs", "cuda"),
      one("graph-warmup", "-1"),
      {"--graph-scope", {"--graphs", "per-layer", "--graph-scope", "attn,ffn"}},
      one("trace", "/nonexistent-parity-dir/t.jsonl"),
      {"--gather-output", {"--gather-output=maybe"}},
      one("runtime-gather-output", "sometimes"),
      one("lr", "-0.5"),
      {"--distributed-optimizer", {"--distributed-optimizer=maybe"}},
      one("metrics", "nope"),
      one("load-weights", "/nonexistent-parity-dir/w.safetensors"),
      one("load-batch", "/nonexistent-parity-dir/b.safetensors"),
      one("dump", "/nonexistent-parity-dir/d"),
      one("optimizer", "lamb"),
      one("adam-beta1", "1"),
      one("adam-beta2", "-0.5"),
      one("adam-eps", "0"),
      one("save-checkpoint", "/nonexistent-parity-dir/ck"),
      one("save-every", "-1"),
      one("resume", "/nonexistent-parity-dir/ck"),
      one("resume-at", "-1"),
      {"--resume-layout", {"--resume-layout", "tp=1"}},  // needs --resume-at
      one("moe-experts", "-1"),
      {"--moe-topk", {"--moe-experts", "4", "--moe-topk", "5"}},  // in [1, E]
      one("moe-score", "relu"),
      {"--moe-ffn-hidden", {"--moe-experts", "4", "--moe-ffn-hidden", "-3"}},
      {"--moe-layers", {"--moe-experts", "4", "--moe-layers", "every:0"}},
      one("moe-aux-loss", "-0.1"),
      {"--moe-seq-aux-loss", {"--moe-experts", "4", "--moe-seq-aux-loss"}},  // needs aux loss
      one("moe-z-loss", "-0.1"),
      {"--moe-per-layer-logging", {"--moe-per-layer-logging"}},  // needs experts
      one("moe-expert-bias", "-1"),
      one("moe-capacity-factor", "-2"),
      one("moe-shared-expert-ffn", "-8"),
      one("moe-force-routing", "always"),
      {"--padding-fraction", {"--moe-experts", "4", "--padding-fraction", "1.0"}},
      one("mtp-layers", "-1"),
      {"--mtp-repeated-layer", {"--mtp-repeated-layer"}},                 // needs --mtp-layers
      {"--observe-wgrad", {"--observe-wgrad", "--graphs", "per-layer"}},  // needs graphs none
      one("padding-token-shift", "-1"),
      one("pp", "0"),
      {"--vpp", {"--pp", "2", "--vpp", "2"}},  // 2 layers: one per stage, not divisible by 2 chunks
      one("pp-first-layers", "-1"),
      {"--pp-last-layers", {"--pp", "2", "--pp-last-layers", "5"}},  // more than the layers
      {"--pp-account-embedding", {"--pp-account-embedding=maybe"}},
      {"--pp-account-loss", {"--pp-account-loss=maybe"}},
      {"--pp-layout", {"--pp", "2", "--pp-layout", "Ex|tL"}},  // unknown layer character
  };
}

std::string name_of(const ::testing::TestParamInfo<BadValue>& info) {
  std::string name = info.param.flag.substr(2);
  for (char& ch : name)
    if (ch == '-') ch = '_';
  return name;
}

class EveryOption : public ::testing::TestWithParam<BadValue> {};

// The options parity selfcheck takes (the layout and the launch), from its help.
bool selfcheck_takes(const std::string& flag) {
  static const std::string help = [] {
    std::string out, err;
    run_parity({"selfcheck", "--help"}, &out, &err);
    return out;
  }();
  return help.find(flag + " ") != std::string::npos || help.find(flag + ",") != std::string::npos;
}

TEST_P(EveryOption, RejectsABadValueWithExit2NamingTheFlag) {
  for (const char* command : {"run", "selfcheck"}) {
    if (std::string(command) == "selfcheck" && !selfcheck_takes(GetParam().flag)) continue;
    std::vector<std::string> a = {command};
    a.insert(a.end(), GetParam().args.begin(), GetParam().args.end());
    std::string out, err;
    EXPECT_EQ(run_parity(a, &out, &err), kExitBadInput) << command << ": " << err;
    EXPECT_NE(err.find(GetParam().flag), std::string::npos) << err;
    EXPECT_EQ(err.find('\n'), err.size() - 1) << "one line: " << err;
  }
}

INSTANTIATE_TEST_SUITE_P(CommandLine, EveryOption, ::testing::ValuesIn(bad_values()), name_of);

TEST(CommandLine, EveryOptionHasABadValueCase) {
  std::vector<std::string> covered;
  for (const BadValue& b : bad_values()) covered.push_back(b.flag);
  for (const RunConfigField& f : run_config_fields())
    EXPECT_NE(std::find(covered.begin(), covered.end(), "--" + std::string(f.key)), covered.end())
        << "no bad-value case for --" << f.key;
  EXPECT_EQ(covered.size(), run_config_fields().size());
}

// mutants' own numbers: a negative seed is refused, not wrapped.
TEST(CommandLine, MutantsOptionsHaveRangeRules) {
  for (const std::vector<std::string>& a :
       std::vector<std::vector<std::string>>{{"mutants", "--seed", "-5"},
                                             {"mutants", "--cases", "0"},
                                             {"mutants", "--shrink-steps", "-1"}}) {
    const ParsedCommand p = parse_parity(a);
    ASSERT_EQ(p.errors.size(), 1u) << a[1];
    EXPECT_NE(p.errors[0].find(a[1]), std::string::npos) << p.errors[0];
  }
}

}  // namespace
}  // namespace parity::cli
