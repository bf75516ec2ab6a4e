// `parity diff A B` end to end through run_command_line: traces written by
// `parity run --trace`, the exit codes 0 (equal), 1 (first divergence printed,
// naming the site), 2 (bad input), the wiring of the project's tolerance
// rule (checks::tolerances_for: fp32 rel 1e-5), and a `parity run --dump`
// folder as either operand.
#include <gtest/gtest.h>

#include <functional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "harness/base/files.h"
#include "harness/cli/cli.h"
#include "tests/support/command_line.h"

namespace parity::cli {
namespace {

// `parity <args>`: the exit code; the last call's streams in out and err.
struct Runner {
  std::string out, err;
  int operator()(std::vector<std::string> args) {
    return testing::run_parity(std::move(args), &out, &err);
  }
};

// Rewrites line `index` (0-based) of a trace with `edit`; drops it when edit returns null.
std::string edit_line(const std::string& text, std::size_t index,
                      const std::function<void(nlohmann::json&)>& edit) {
  std::istringstream in(text);
  std::string line, out;
  for (std::size_t i = 0; std::getline(in, line); ++i) {
    if (i != index) {
      out += line + "\n";
      continue;
    }
    nlohmann::json j = nlohmann::json::parse(line);
    edit(j);
    if (!j.is_null()) out += j.dump() + "\n";
  }
  return out;
}

class DiffCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : {"a", "b"})
      ASSERT_EQ(run({"run", "--hidden", "32", "--ffn-hidden", "64", "--vocab", "64", "--steps", "1",
                     "--trace", path(name)}),
                kExitOk)
          << run.err;
    text = files::read(path("a")).value_or("");
    ASSERT_FALSE(text.empty());
  }
  std::string path(const std::string& name) const { return dir.path() + "/" + name + ".jsonl"; }

  files::TempDir dir{"parity-diff-test"};
  Runner run;
  std::string text;
};

TEST_F(DiffCommand, EqualTracesExitZero) {
  EXPECT_EQ(run({"diff", path("a"), path("b")}), kExitOk) << run.err;
  EXPECT_NE(run.out.find("traces equal: 26 record pairs"), std::string::npos) << run.out;
}

TEST_F(DiffCommand, OnePerturbedValueExitsOneNamingTheSite) {
  // Line 5 (seq 4) is decoder.layers.0.residual_accumulator of microbatch 0.
  files::write_atomically(path("c"), edit_line(text, 4, [](nlohmann::json& j) {
                            j["sum"] = j["sum"].get<double>() + 1e-3;
                          }));
  EXPECT_EQ(run({"diff", path("a"), path("c")}), kExitPropertyFailed);
  EXPECT_NE(run.out.find("traces differ: decoder.layers.0.residual_accumulator (rank 0, "
                         "step 0, microbatch 0, phase eager): sum "),
            std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find("> fp32 rel 1e-05)"), std::string::npos) << run.out;
  // Within the fp32 rule: equal.
  files::write_atomically(path("d"), edit_line(text, 4, [](nlohmann::json& j) {
                            j["sum"] = j["sum"].get<double>() * (1 + 1e-7);
                          }));
  EXPECT_EQ(run({"diff", path("a"), path("d")}), kExitOk) << run.out;
}

TEST_F(DiffCommand, AMissingRecordExitsOne) {
  files::write_atomically(path("c"), edit_line(text, 12, [](nlohmann::json& j) { j = nullptr; }));
  EXPECT_EQ(run({"diff", path("a"), path("c")}), kExitPropertyFailed);
  EXPECT_NE(run.out.find("output_layer.output_logits (rank 0, step 0, microbatch 0, phase "
                         "eager): 1 record(s) in "),
            std::string::npos)
      << run.out;
}

TEST_F(DiffCommand, BadInputExitsTwoWithOneLine) {
  files::write_atomically(path("bad"), text + "not json\n");
  EXPECT_EQ(run({"diff", path("a"), path("bad")}), kExitBadInput);
  EXPECT_EQ(run.err, path("bad") +
                         ":27: not a JSON object (each line of a trace is one "
                         "JSON record, docs/trace-format.md)\n");
  EXPECT_EQ(run({"diff", path("a"), path("missing")}), kExitBadInput);
  EXPECT_EQ(run.err, path("missing") + ": cannot read the trace file (missing or unreadable)\n");
  EXPECT_EQ(run({"diff", path("a"), path("b"), "--kinds", "router_nope"}), kExitBadInput);
  EXPECT_EQ(run({"diff", path("a")}), kExitBadInput);
  // Nothing to compare is not "equal".
  files::write_atomically(path("empty"), "");
  EXPECT_EQ(run({"diff", path("empty"), path("empty")}), kExitBadInput);
  EXPECT_NE(run.err.find("no records to compare"), std::string::npos) << run.err;
}

TEST_F(DiffCommand, ADumpFolderIsReadAsItsTrace) {
  const std::string dump = dir.path() + "/dump", other = dir.path() + "/other";
  const std::vector<std::string> model = {"run", "--hidden", "32", "--ffn-hidden", "64", "--vocab",
                                          "64",  "--steps",  "1"};
  std::vector<std::string> args = model;
  args.insert(args.end(), {"--dump", dump});
  ASSERT_EQ(run(args), kExitOk) << run.err;
  // Either side may be the dump; messages name its trace.jsonl.
  EXPECT_EQ(run({"diff", path("a"), dump}), kExitOk) << run.err;
  EXPECT_NE(run.out.find("traces equal: 26 record pairs compared within the dtype's "
                         "tolerance (" +
                         path("a") + ", " + dump + "/trace.jsonl)"),
            std::string::npos)
      << run.out;
  EXPECT_EQ(run({"diff", dump, path("a")}), kExitOk) << run.err;
  EXPECT_EQ(run({"diff", dump, dump}), kExitOk) << run.err;

  // A perturbed run (another seed: other weights) differs from the first site on.
  args = model;
  args.insert(args.end(), {"--seed", "99", "--dump", other});
  ASSERT_EQ(run(args), kExitOk) << run.err;
  EXPECT_EQ(run({"diff", path("a"), other}), kExitPropertyFailed) << run.err;
  EXPECT_NE(run.out.find("traces differ: decoder.layers.0.input_layernorm.layernorm_output "
                         "(rank 0, step 0, microbatch 0, phase eager): "),
            std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find(other + "/trace.jsonl:1)"), std::string::npos) << run.out;

  // A folder that is not a dump: one line naming the path and the rule, exit 2.
  const std::string rule =
      ": a folder, but not a dump (parity diff reads a folder only when it holds manifest.json "
      "with \"format\": \"parity-dump\", as parity run --dump writes; otherwise give a trace "
      "file)\n";
  EXPECT_EQ(run({"diff", dir.path(), path("a")}), kExitBadInput);
  EXPECT_EQ(run.err, dir.path() + rule);
  EXPECT_EQ(run.out, "");
  // A manifest of another format, or not JSON, is no dump either.
  files::write_atomically(dir.path() + "/manifest.json", R"({"format": "something-else"})");
  EXPECT_EQ(run({"diff", path("a"), dir.path()}), kExitBadInput);
  EXPECT_EQ(run.err, dir.path() + rule);
  files::write_atomically(dump + "/manifest.json", "{not json");
  EXPECT_EQ(run({"diff", path("a"), dump}), kExitBadInput);
  EXPECT_EQ(run.err, dump + rule);
}

}  // namespace
}  // namespace parity::cli
