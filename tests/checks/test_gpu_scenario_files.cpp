// scenarios/gpu/*.json, the fixed set ci/gpu-validate checks on a GPU: checked here
// on every CI run, so a GPU session never starts with a file parity rejects.
// Each must be a valid check scenario apart from the backend (validated as if on
// the reference), promise backend_parity PASS, run 8 thread ranks on the one GPU,
// and capture graphs only where the ranks issue no collective inside the captured
// regions (tp = cp = 1: thread ranks on one GPU reach each other through the
// host, which a CUDA graph cannot capture; docs/cuda-backend.md). Together they
// cover every recompute kind, every graph mode, fp32 and bf16.
#include <gtest/gtest.h>

#include <dirent.h>

#include <algorithm>
#include <set>

#include "harness/checks/check.h"
#include "harness/checks/scenario.h"

namespace parity::checks {
namespace {

std::vector<std::string> gpu_scenario_files() {
  const std::string dir = std::string(PARITY_SOURCE_DIR) + "/scenarios/gpu";
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0)
        out.push_back(dir + "/" + name);
    }
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(GpuScenarioFiles, AreValidAndCoverEveryRecomputeKindGraphModeAndDtype) {
  const std::vector<std::string> files = gpu_scenario_files();
  ASSERT_GE(files.size(), 4u);
  std::set<std::string> recompute, graphs, dtypes;
  for (const std::string& path : files) {
    SCOPED_TRACE(path);
    ScenarioMeta meta;
    RunConfig c = run_config_from_json(read_scenario_file(path, &meta));
    EXPECT_EQ(c.backend, "cuda");
    EXPECT_EQ(meta.expect["backend_parity"], "PASS");
    EXPECT_EQ(c.world_size(), 8);
    EXPECT_EQ(c.launch, LaunchMode::threads);
    if (c.graphs != GraphMode::none) {
      EXPECT_EQ(c.tp, 1);
      EXPECT_EQ(c.cp, 1);
    }
    c.backend = "reference";
    for (const ConfigViolation& v : validate_check_scenario(c)) ADD_FAILURE() << format_for_cli(v);
    recompute.insert(c.recompute.substr(0, c.recompute.find(':')));
    graphs.insert(std::string(to_string(c.graphs)));
    dtypes.insert(std::string(to_string(c.dtype)));
  }
  EXPECT_EQ(recompute, (std::set<std::string>{"none", "selective", "full-uniform", "full-block"}));
  EXPECT_EQ(graphs, (std::set<std::string>{"none", "per-layer", "full-iteration"}));
  EXPECT_EQ(dtypes, (std::set<std::string>{"fp32", "bf16"}));
}

}  // namespace
}  // namespace parity::checks
