// --help, parity list and --version against the registries they are generated
// from, docs/cli.md against both; and the suggestions for mistyped names.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include <nlohmann/json.hpp>

#include "harness/backend/version.h"
#include "harness/base/files.h"
#include "harness/base/nearest_names.h"
#include "harness/checks/property.h"
#include "harness/checks/report.h"
#include "harness/cli/cli.h"
#include "harness/cli/commands.h"
#include "harness/compat/torch_compat.h"
#include "harness/config/run_config_fields.h"
#include "harness/faults/code_path_faults.h"
#include "harness/metrics/metric_names.h"
#include "harness/runtime/runtime_faults.h"
#include "tests/support/command_line.h"

namespace parity::cli {
namespace {

struct Result {
  int code = -1;
  std::string out, err;
};

Result run(std::vector<std::string> a) {
  Result r;
  r.code = testing::run_parity(std::move(a), &r.out, &r.err);
  return r;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::vector<std::string> list_names(const std::string& what) {
  const Result r = run({"list", what, "--json"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  std::vector<std::string> names;
  for (const nlohmann::json& row : nlohmann::json::parse(r.out)) {
    EXPECT_FALSE(row["doc"].get<std::string>().empty()) << what << " " << row;
    EXPECT_FALSE(row["needs"].get<std::string>().empty()) << what << " " << row;
    for (const char* key : {"name", "doc", "needs"})
      EXPECT_EQ(row[key].get<std::string>().find('\n'), std::string::npos) << row;
    names.push_back(row["name"]);
  }
  return names;
}

std::string cli_doc() {
  const std::optional<std::string> text = files::read(PARITY_SOURCE_DIR "/docs/cli.md");
  EXPECT_TRUE(text.has_value());
  return text.value_or("");
}

// Every option of every command shows a type of its own (no TEXT for a
// number), its default, and booleans their negation without CLI11's {false}.
TEST(Help, GeneratedFromTheFieldTable) {
  const Result h = run({"run", "--help"});
  ASSERT_EQ(h.code, kExitOk);
  const RunConfig defaults;
  for (const RunConfigField& f : run_config_fields()) {
    const std::string flag = "--" + std::string(f.key);
    if (f.type == FieldType::flag) {
      EXPECT_TRUE(contains(h.out, flag + ", --no-" + std::string(f.key))) << flag << "\n" << h.out;
      continue;
    }
    EXPECT_TRUE(contains(h.out, flag + " " + help_type_name(f))) << flag << "\n" << h.out;
    if (f.type == FieldType::integer) {
      EXPECT_EQ(help_type_name(f), "INT") << flag;
    } else if (f.type == FieldType::real) {
      EXPECT_EQ(help_type_name(f), "FLOAT") << flag;
    }
  }
  EXPECT_TRUE(contains(h.out, "tensor-parallel size (default: 1)")) << h.out;
  EXPECT_TRUE(contains(h.out, "sequence parallelism (needs --tp > 1) (default: off)")) << h.out;
  const std::vector<std::string> commands = {"--help",      "check --help", "selfcheck --help",
                                             "run --help",  "repro --help", "mutants --help",
                                             "diff --help", "sweep --help", "list --help"};
  for (const std::string& c : commands) {
    std::vector<std::string> args;
    std::istringstream words(c);
    for (std::string w; words >> w;) args.push_back(w);
    const Result r = run(args);
    ASSERT_EQ(r.code, kExitOk) << c;
    for (const char* wrong : {" TEXT", "{false}", "{true}", "(parity --help lists"})
      EXPECT_FALSE(contains(r.out, wrong)) << c << " shows " << wrong << ":\n" << r.out;
  }
  const Result m = run({"mutants", "--help"});
  for (const char* shown : {"--cases INT", "(default: 40)", "--seed UINT", "(default: 20261203)",
                            "--shrink-steps INT", "(default: 60)"})
    EXPECT_TRUE(contains(m.out, shown)) << shown << "\n" << m.out;
}

// check's blurb, in parity --help and check --help, names every property.
TEST(Help, CheckNamesEveryRegisteredProperty) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"--help"}, {"check", "--help"}}) {
    const Result r = run(args);
    for (const checks::Property* p : checks::registered_properties())
      EXPECT_TRUE(contains(r.out, std::string(p->name()))) << p->name() << " in\n" << r.out;
  }
}

// The help lists the commands there are, docs/cli.md's command table too.
TEST(Help, CommandsMatchTheTableAndTheDocs) {
  const Result r = run({"--help"});
  const std::size_t at = r.out.find("ubcommands:");
  ASSERT_NE(at, std::string::npos) << r.out;
  std::istringstream lines(r.out.substr(at));
  std::vector<std::string> listed, known;
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("  ", 0) == 0 && line.size() > 2 && line[2] != ' ')
      listed.push_back(line.substr(2, line.find(' ', 2) - 2));
  for (const CommandInfo& c : command_table()) known.push_back(c.name);
  EXPECT_EQ(listed, known);
  // docs/cli.md's command table: one row per command, none that does not exist.
  const std::string doc = cli_doc();
  const std::size_t table = doc.find("| command | what it does |");
  ASSERT_NE(table, std::string::npos);
  std::istringstream rows(doc.substr(table));
  std::vector<std::string> documented;
  std::string row;
  std::getline(rows, row);  // header
  std::getline(rows, row);  // |---|
  while (std::getline(rows, row) && row.rfind("| `", 0) == 0)
    documented.push_back(row.substr(3, row.find_first_of(" `", 3) - 3));
  EXPECT_EQ(documented, known);
}

// Every option of the field table is in docs/cli.md and in parity list options.
TEST(Help, EveryOptionIsDocumented) {
  const std::string doc = cli_doc();
  std::vector<std::string> keys;
  for (const RunConfigField& f : run_config_fields()) {
    keys.push_back("--" + std::string(f.key));
    EXPECT_TRUE(contains(doc, "`--" + std::string(f.key))) << "docs/cli.md lacks --" << f.key;
  }
  EXPECT_EQ(list_names("options"), keys);
  for (const std::string& what : list_kinds())
    EXPECT_TRUE(contains(doc, "parity list " + what) || contains(doc, "`" + what + "`"))
        << "docs/cli.md: parity list " << what;
  EXPECT_TRUE(contains(doc, "parity --version"));
}

// selfcheck builds no model: it takes the layout and launch options only.
TEST(Help, SelfcheckTakesTheOptionsItReads) {
  EXPECT_EQ(run({"selfcheck", "--tp", "3"}).code, kExitOk);
  Result r = run({"selfcheck", "--trace", "t.jsonl"});
  EXPECT_EQ(r.code, kExitBadInput);
  EXPECT_EQ(r.err,
            "parity: --trace: not an option of parity selfcheck (it builds no model: it takes the "
            "layout and launch options only; see parity selfcheck --help)\n");
  r = run({"check", "--self-check", "--hidden", "96"});
  EXPECT_EQ(r.code, kExitBadInput);
  EXPECT_EQ(r.err,
            "--hidden: not an option of the runtime self-check (check --self-check = parity "
            "selfcheck; see parity selfcheck --help)\n");
  r = run({"selfcheck", "--help"});
  for (const char* taken : {"--tp", "--ep", "--launch", "--timeout", "--inject", "--report"})
    EXPECT_TRUE(contains(r.out, taken)) << taken;
  for (const char* ignored : {"--trace", "--hidden", "--steps", "--metrics", "--dump"})
    EXPECT_FALSE(contains(r.out, ignored)) << ignored;
}

TEST(List, MatchesTheRegistries) {
  std::vector<std::string> faults;
  for (const FaultInfo& f : fault_registry())
    faults.push_back(f.name + (f.argument == FaultArgument::rank ? "=R" : ""));
  EXPECT_EQ(list_names("faults"), faults);
  for (const CodePathFaultInfo& f : code_path_faults())
    EXPECT_NE(std::find(faults.begin(), faults.end(), std::string(f.name)), faults.end());
  std::vector<std::string> properties;
  for (const checks::Property* p : checks::registered_properties())
    properties.emplace_back(p->name());
  EXPECT_EQ(list_names("properties"), properties);
  EXPECT_EQ(list_names("metrics"), known_metric_names());
  const std::vector<std::string> scenarios = list_names("scenarios");
  ASSERT_FALSE(scenarios.empty());
  EXPECT_EQ(scenarios[0], "(embedded default)");
  for (const char* file : {"scenarios/moe.json", "scenarios/field/megatron-673-cp-loss-scale.json"})
    EXPECT_TRUE(std::any_of(scenarios.begin(), scenarios.end(), [&](const std::string& s) {
      return s.size() >= std::string(file).size() &&
             s.compare(s.size() - std::string(file).size(), std::string::npos, file) == 0;
    })) << file;
  EXPECT_FALSE(std::any_of(scenarios.begin(), scenarios.end(),
                           [](const std::string& s) { return contains(s, "sweeps/"); }));

  const Result table = run({"list", "faults"});
  EXPECT_TRUE(contains(table.out, "sqrt-before-sum")) << table.out;
  EXPECT_TRUE(contains(table.out, "needs: caught by sharded_reduction when")) << table.out;
  const Result bad = run({"list", "fault"});
  EXPECT_EQ(bad.code, kExitBadInput);
  EXPECT_EQ(bad.err,
            "parity list fault: not a list: did you mean \"faults\"? (lists: faults, properties, "
            "metrics, scenarios, options)\n");
  EXPECT_EQ(run({"list"}).code, kExitBadInput);
}

// Messages that named `parity --help` as the list of faults name parity list.
TEST(List, FaultMessagesPointAtIt) {
  Result r = run({"mutants", "--fault", "nope"});
  EXPECT_EQ(r.code, kExitBadInput);
  EXPECT_EQ(r.err, "--fault nope: not a code-path fault (parity list faults lists them)\n");
  r = run({"run", "--help"});
  EXPECT_TRUE(contains(r.out, "(parity list faults lists them)")) << r.out;
}

TEST(Version, FlagReportsAndLaunchReportCarryTheBuild) {
  const Result r = run({"--version"});
  EXPECT_EQ(r.code, kExitOk);
  EXPECT_EQ(r.out, version_text() + "\n");
  const VersionInfo v = version_info();
  EXPECT_FALSE(v.parity.empty());
  EXPECT_TRUE(v.commit == "unknown" || v.commit.size() >= 12) << v.commit;
  EXPECT_EQ(v.libtorch, TORCH_VERSION);
  EXPECT_NE(std::find(v.backends.begin(), v.backends.end(), "reference"), v.backends.end());
  EXPECT_TRUE(contains(r.out, "parity " + v.parity + " (commit " + v.commit + ")")) << r.out;
  EXPECT_TRUE(contains(r.out, "LibTorch " + v.libtorch)) << r.out;

  EXPECT_EQ(checks::report_json(checks::CheckReport{})["build"], version_json());
  const files::TempDir dir("parity-version-test");
  const std::string path = dir.path() + "/r.json";
  ASSERT_EQ(run({"selfcheck", "--report", path}).code, kExitOk);
  const nlohmann::json report = nlohmann::json::parse(files::read(path).value_or("null"));
  EXPECT_EQ(report["build"], nlohmann::json(version_json()));
}

TEST(Suggestions, NearestNames) {
  const std::vector<std::string> keys = {"tp", "cp", "dp", "microbatches", "micro-batch"};
  EXPECT_EQ(nearest_names("microbatchs", keys), std::vector<std::string>{"microbatches"});
  EXPECT_EQ(nearest_names("micro_batch", keys), std::vector<std::string>{"micro-batch"});
  EXPECT_EQ(nearest_names("tpp", keys), std::vector<std::string>{"tp"});
  EXPECT_EQ(nearest_names("xp", keys), (std::vector<std::string>{"tp", "cp", "dp"}));
  EXPECT_TRUE(nearest_names("layers", keys).empty());
  EXPECT_EQ(did_you_mean("xp", keys), "did you mean \"tp\", \"cp\" or \"dp\"?");
  EXPECT_EQ(did_you_mean("zzzz", keys), "");
}

// A mistyped name is answered with the nearest known one, not a list of all.
TEST(Suggestions, TyposAreNamedWithTheirNearestName) {
  const files::TempDir dir("parity-typo-test");
  const std::string file = dir.path() + "/s.json";
  files::write_atomically(file, R"({"microbatchs": 4})");
  Result r = run({"check", file});
  EXPECT_EQ(r.code, kExitBadInput);
  EXPECT_EQ(r.err, file +
                       ": unknown key \"microbatchs\": did you mean \"microbatches\"? (parity "
                       "list options lists the " +
                       std::to_string(run_config_fields().size()) + " keys)\n");
  files::write_atomically(file, R"({"tp": 2, "expect": {"exactly_onec": "PASS"}})");
  r = run({"check", file});
  EXPECT_TRUE(contains(r.err,
                       "\"expect\".\"exactly_onec\": unknown property: did you mean "
                       "\"exactly_once\"?"))
      << r.err;

  r = run({"run", "--microbatchs", "3"});
  EXPECT_EQ(r.code, kExitBadInput);
  EXPECT_EQ(r.err,
            "parity: --microbatchs: not an option of parity run: did you mean --microbatches? "
            "(see parity run --help)\n");
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;

  r = run({"run", "--inject", "sqrt-befor-sum"});
  EXPECT_EQ(r.code, kExitBadInput);
  EXPECT_TRUE(contains(r.err,
                       "unknown fault \"sqrt-befor-sum\": did you mean \"sqrt-before-sum\"? "
                       "(parity list faults lists the "))
      << r.err;
  EXPECT_FALSE(contains(r.err, "known:")) << r.err;

  r = run({"run", "--metrics", "layer-residual-contribution-l3"});
  EXPECT_EQ(r.code, kExitBadInput);
  EXPECT_TRUE(contains(r.err,
                       "unknown metric 'layer-residual-contribution-l3': did you mean "
                       "'layer-residual-contribution-l2'? (parity list metrics lists the "))
      << r.err;

  r = run({"mutants", "--fault", "sqrt-befor-sum"});
  EXPECT_EQ(r.err,
            "--fault sqrt-befor-sum: not a code-path fault: did you mean \"sqrt-before-sum\"? "
            "(parity list faults lists them)\n");
  r = run({"sweeps"});
  EXPECT_TRUE(contains(r.err, "parity: unknown command \"sweeps\": did you mean \"sweep\"?"))
      << r.err;
}

}  // namespace
}  // namespace parity::cli
