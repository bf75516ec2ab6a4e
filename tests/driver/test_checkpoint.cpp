// Checkpoints end to end (docs/weights.md "Saving and resuming"): thread ranks
// train, save parity's sharded checkpoint and resume from it. At the saving
// layout the resumed run is the uninterrupted run bit for bit (dropout
// included: the RNG streams carry over); at another layout (TP, CP, DP with the
// distributed optimizer, EP, PP either way) it trains as the uninterrupted
// single-rank run (resume_invariance's comparison, fp64). A save killed
// mid-way leaves the previous checkpoint the newest and loadable.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/base/files.h"
#include "harness/checks/properties.h"
#include "harness/config/launch_mapping.h"
#include "harness/driver/training_step.h"
#include "harness/model/checkpoint.h"
#include "tests/support/model_configs.h"
#include "tests/support/model_runs.h"

namespace parity {
namespace {

using testing::run_model;

RunConfig base_run() {
  RunConfig c = testing::small_config<RunConfig>();
  c.steps = 4;
  c.microbatches = 2;
  c.dtype = ModelDType::fp64;
  c.seed = 11;
  c.lr = 0.5;
  c.timeout = 60;
  return c;
}

// `c` trained to step `at` and saved into `dir`, then resumed there at `later`
// (the same run at another layout) to c.steps: the two launches' results.
struct Resumed {
  LaunchResult saving, resuming;
};
Resumed save_and_resume(const RunConfig& c, RunConfig later, int at, const std::string& dir) {
  RunConfig saving = c;
  saving.steps = at;
  saving.save_checkpoint = dir;
  later.steps = c.steps;
  later.resume = dir;
  return {run_model(saving), run_model(later)};
}

TEST(Checkpoint, ResumedAtTheSavingLayoutIsTheUninterruptedRunBitForBit) {
  files::TempDir dir("parity-checkpoint-test");
  RunConfig c = base_run();
  c.tp = 2;
  c.dp = 2;
  c.sp = true;
  c.dtype = ModelDType::fp32;
  c.dropout = 0.1;  // the masks after the resume come from the restored streams
  c.optimizer = OptimizerKind::adam;
  c.distributed_optimizer = true;
  c.lr = 0.01;
  const LaunchResult whole = run_model(c);
  const Resumed r = save_and_resume(c, c, 2, dir.path() + "/ck");
  ASSERT_TRUE(whole.ok() && r.saving.ok() && r.resuming.ok());
  for (std::size_t rank = 0; rank < whole.results.size(); ++rank) {
    const nlohmann::json& w = whole.results[rank];
    const nlohmann::json& s = r.saving.results[rank];
    const nlohmann::json& z = r.resuming.results[rank];
    ASSERT_EQ(s["steps"].size(), 2u);
    ASSERT_EQ(z["steps"].size(), 2u);
    EXPECT_EQ(z["resumed"]["step"], 2);
    EXPECT_EQ(z["resumed"]["rng_restored"], true);
    for (int step = 0; step < 4; ++step) {
      const nlohmann::json& got = step < 2 ? s["steps"][step] : z["steps"][step - 2];
      SCOPED_TRACE("rank " + std::to_string(rank) + " step " + std::to_string(step));
      EXPECT_EQ(got["step"], step);
      EXPECT_EQ(got["loss"], w["steps"][step]["loss"]);
      EXPECT_EQ(got["logits_digest"], w["steps"][step]["logits_digest"]);
      EXPECT_EQ(got["grad_digest"], w["steps"][step]["grad_digest"]);
    }
    EXPECT_EQ(z["final_parameters"], w["final_parameters"]);
  }
}

struct LayoutChange {
  std::string name;
  RunConfig saving, resuming;
};
void PrintTo(const LayoutChange& l, std::ostream* os) { *os << l.name; }

LayoutChange change(std::string name, const std::function<void(RunConfig&)>& saving,
                    const std::function<void(RunConfig&)>& resuming) {
  LayoutChange l{std::move(name), base_run(), base_run()};
  saving(l.saving);
  resuming(l.resuming);
  return l;
}

std::vector<LayoutChange> layout_changes() {
  auto moe = [](RunConfig& c) {
    c.moe_experts = 4;
    c.moe_topk = 2;
    c.moe_expert_bias = 0.01;  // router state the checkpoint carries
    c.moe_aux_loss = 0.01;
  };
  return {
      change(
          "tp2_sp_to_tp1",
          [](RunConfig& c) {
            c.tp = 2;
            c.sp = true;
            c.activation = ActivationKind::swiglu;  // fc1's two boxes per TP shard
          },
          [](RunConfig& c) { c.activation = ActivationKind::swiglu; }),
      change(
          "dp1_to_dp2_distributed_adam",
          [](RunConfig& c) {
            c.optimizer = OptimizerKind::adam;
            c.distributed_optimizer = true;
            c.lr = 0.01;
            c.microbatches = 4;
          },
          [](RunConfig& c) {
            c.optimizer = OptimizerKind::adam;
            c.distributed_optimizer = true;
            c.lr = 0.01;
            c.dp = 2;
          }),
      change(
          "dp2_distributed_adam_to_tp2_dp1",
          [](RunConfig& c) {
            c.optimizer = OptimizerKind::adam;
            c.distributed_optimizer = true;
            c.lr = 0.01;
            c.dp = 2;
          },
          [](RunConfig& c) {
            c.optimizer = OptimizerKind::adam;
            c.lr = 0.01;
            c.tp = 2;
            c.microbatches = 4;
          }),
      change(
          "cp2_to_cp1", [](RunConfig& c) { c.cp = 2; }, [](RunConfig&) {}),
      change(
          "ep2_to_ep1",
          [&](RunConfig& c) {
            moe(c);
            c.dp = 2;
            c.ep = 2;
          },
          [&](RunConfig& c) {
            moe(c);
            c.microbatches = 4;
          }),
      // Experts over an expert TP size of their own (each TP rank holds whole
      // experts): their pieces split over the expert TP group, not tp.
      change(
          "tp2_sp_etp1_ep2_to_tp1",
          [&](RunConfig& c) {
            moe(c);
            c.tp = 2;
            c.sp = true;
            c.etp = 1;
            c.ep = 2;
            c.optimizer = OptimizerKind::adam;
            c.lr = 0.01;
          },
          [&](RunConfig& c) {
            moe(c);
            c.optimizer = OptimizerKind::adam;
            c.lr = 0.01;
          }),
      change(
          "pp2_to_pp1",
          [](RunConfig& c) {
            c.pp = 2;
            c.layers = 4;
          },
          [](RunConfig& c) { c.layers = 4; }),
      change(
          "pp1_to_pp2_vpp2_tp2", [](RunConfig& c) { c.layers = 4; },
          [](RunConfig& c) {
            c.layers = 4;
            c.pp = 2;
            c.vpp = 2;
            c.tp = 2;
          }),
  };
}

class ResumeAtAnotherLayout : public ::testing::TestWithParam<LayoutChange> {};

TEST_P(ResumeAtAnotherLayout, TrainsAsTheUninterruptedSingleRankRun) {
  const LayoutChange& l = GetParam();
  files::TempDir dir("parity-checkpoint-test");
  const Resumed r = save_and_resume(l.saving, l.resuming, 2, dir.path() + "/ck");
  RunConfig single = l.saving;
  single.microbatches = l.saving.microbatches * l.saving.dp;
  single.tp = single.cp = single.dp = single.ep = 1;
  single.sp = false;
  single.clear_pipeline();
  single.distributed_optimizer = false;
  const LaunchResult whole = run_model(single);
  ASSERT_TRUE(whole.ok() && r.saving.ok() && r.resuming.ok());
  // The losses, directly: the same on every rank, each step the single-rank run's.
  for (const nlohmann::json& rank : r.resuming.results)
    for (const nlohmann::json& s : rank["steps"]) {
      const double want = whole.results[0]["steps"][s["step"].get<std::size_t>()]["loss"];
      EXPECT_NEAR(s["loss"].get<double>(), want, 1e-10 * want) << "step " << s["step"];
    }
  // Everything resume_invariance compares.
  RunConfig resuming = l.resuming;
  resuming.steps = l.saving.steps;
  RunConfig saving = l.saving;
  saving.steps = 2;
  checks::CheckRun resumed = checks::check_run_from("r", "", resuming, r.resuming.results);
  resumed.saved_by = std::make_shared<const checks::CheckRun>(
      checks::check_run_from("r", "", saving, r.saving.results));
  const checks::CheckRun reference = checks::check_run_from("b", "", single, whole.results);
  const checks::PropertyResult p = checks::check_resume_invariance(resumed, reference);
  EXPECT_EQ(p.status, checks::Status::pass) << p.reason;
}

INSTANTIATE_TEST_SUITE_P(Layouts, ResumeAtAnotherLayout, ::testing::ValuesIn(layout_changes()),
                         [](const auto& info) { return info.param.name; });

TEST(Checkpoint, PiecesCarryGlobalOffsetsAndOneMainReplica) {
  files::TempDir dir("parity-checkpoint-test");
  RunConfig c = base_run();
  c.tp = 2;
  c.dp = 2;
  c.steps = 1;
  c.optimizer = OptimizerKind::adam;
  c.distributed_optimizer = true;
  c.activation = ActivationKind::swiglu;
  c.save_checkpoint = dir.path() + "/ck";
  ASSERT_TRUE(run_model(c).ok());
  const checkpoint::Reader reader(c.save_checkpoint);
  const nlohmann::json& m = reader.manifest();
  EXPECT_EQ(m["format"], "parity-checkpoint");
  EXPECT_EQ(m["step"], 1);
  EXPECT_EQ(m["optimizer"]["step"], 1);
  EXPECT_EQ(m["layout"]["world"], 4);
  EXPECT_EQ(m["data"]["next_global_microbatch"], 4);  // 1 step of dp 2 x 2 microbatches
  EXPECT_EQ(m["data"]["batch"], "seeded");
  ASSERT_EQ(m["files"].size(), 4u);
  // Each (key, offset) has one main replica among the ranks holding it; a TP
  // shard is held by the DP ranks (2 copies), a TP replica by every rank (4).
  std::map<std::string, std::vector<int>> replicas;
  for (const nlohmann::json& f : m["files"])
    for (const nlohmann::json& e : f["entries"]) {
      const std::string id = e["key"].get<std::string>() + "@" + e["global_offset"].dump();
      replicas[id].push_back(e["replica_id"].get<int>());
      EXPECT_EQ(e["storage"].get<std::string>().empty(), e["replica_id"] != 0) << id;
    }
  for (const auto& [id, ids] : replicas) {
    std::multiset<int> got(ids.begin(), ids.end());
    std::multiset<int> want;
    for (int i = 0; i < static_cast<int>(ids.size()); ++i) want.insert(i);
    EXPECT_EQ(got, want) << id;
  }
  // SwiGLU's fc1 shard is two boxes per TP rank: [gate_r; up_r].
  const std::string fc1 = "decoder.layers.0.mlp.linear_fc1.weight";
  std::set<std::int64_t> rows;
  for (const auto& [id, ids] : replicas)
    if (id.rfind(fc1 + "@", 0) == 0)
      rows.insert(nlohmann::json::parse(id.substr(fc1.size() + 1))[0].get<std::int64_t>());
  EXPECT_EQ(rows, (std::set<std::int64_t>{0, 12, 24, 36}));  // ffn 24: gate 0/12, up 24/36
  EXPECT_EQ(replicas[fc1 + "@[0,0]"].size(), 2u);
  EXPECT_EQ(replicas["decoder.final_layernorm.weight@[0]"].size(), 4u);
  // The distributed optimizer: one flat buffer per TP rank, its ranges.
  ASSERT_EQ(m["flat_buffers"].size(), 2u);
  EXPECT_EQ(m["flat_buffers"]["tp0.pp0"]["dp"], 2);
  EXPECT_TRUE(reader.has("optimizer.flat.exp_avg.tp1.pp0"));
  EXPECT_EQ(reader.full_moment("exp_avg_sq", fc1).sizes().vec(),
            (std::vector<std::int64_t>{48, 16}));
}

TEST(Checkpoint, AKilledSaveLeavesThePreviousCheckpointTheNewestAndLoadable) {
  files::TempDir dir("parity-checkpoint-test");
  const std::string ck = dir.path() + "/ck";
  RunConfig c = base_run();
  c.tp = 2;
  c.dp = 2;
  c.sp = true;
  c.steps = 2;
  c.save_checkpoint = ck;
  ASSERT_TRUE(run_model(c).ok());
  // Resumed, saving after every step: rank 1 crashes inside the first save
  // (the run's fault point), after its own file, before the publication.
  RunConfig killed = c;
  killed.steps = 4;
  killed.save_every = 1;
  killed.resume = ck;
  killed.inject = {"crash-rank=1"};
  register_model_program();
  const LaunchResult failed = launch(killed, kModelProgram);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(files::read(ck + "/" + checkpoint::kTrackerFile).value_or(""), "2\n");
  EXPECT_TRUE(files::exists(ck + "/step_00000003.partial"));
  EXPECT_FALSE(files::exists(ck + "/step_00000003"));
  EXPECT_EQ(checkpoint::Reader(ck).step(), 2);
  // The previous checkpoint resumes as if nothing happened.
  RunConfig again = c;
  again.steps = 3;
  again.save_checkpoint.clear();
  again.resume = ck;
  RunConfig whole = c;
  whole.steps = 3;
  whole.save_checkpoint.clear();
  const LaunchResult resumed = run_model(again), uninterrupted = run_model(whole);
  ASSERT_TRUE(resumed.ok() && uninterrupted.ok());
  EXPECT_EQ(resumed.results[0]["steps"][0]["loss"], uninterrupted.results[0]["steps"][2]["loss"]);
  // The next save of that step replaces the leftovers.
  RunConfig saves = again;
  saves.save_checkpoint = ck;
  ASSERT_TRUE(run_model(saves).ok());
  EXPECT_FALSE(files::exists(ck + "/step_00000003.partial"));
  EXPECT_EQ(checkpoint::Reader(ck).step(), 3);
}

// The message of the CheckpointError `open` throws ("" when none).
std::string error_of(const std::function<void()>& open) {
  try {
    open();
  } catch (const checkpoint::CheckpointError& e) {
    return e.what();
  }
  return "";
}

TEST(Checkpoint, AMissingShardATornFileAndAnotherShapeAreOneLineNamingTheFileAndTheKey) {
  files::TempDir dir("parity-checkpoint-test");
  RunConfig c = base_run();
  c.tp = 2;
  c.steps = 1;
  c.save_checkpoint = dir.path() + "/ck";
  ASSERT_TRUE(run_model(c).ok());
  const std::string step = c.save_checkpoint + "/step_00000001";
  const std::string rank1 = step + "/rank00001.safetensors";
  const std::string bytes = files::read(rank1).value();

  files::remove_tree(rank1);
  const std::string missing = error_of([&] { checkpoint::Reader r(c.save_checkpoint); });
  EXPECT_NE(missing.find(rank1 + ": missing (it holds embedding.word_embeddings.weight and "),
            std::string::npos)
      << missing;

  files::write_atomically(rank1, bytes.substr(0, bytes.size() / 2));  // torn
  const std::string torn = error_of([&] { checkpoint::Reader r(c.save_checkpoint); });
  EXPECT_EQ(torn.rfind(rank1 + ": safetensors: ", 0), 0u) << torn;
  EXPECT_EQ(torn.find('\n'), std::string::npos) << torn;

  files::write_atomically(rank1, bytes);
  const checkpoint::Reader reader(c.save_checkpoint);
  RunConfig wider = c;
  wider.hidden = 32;
  const std::string shape = error_of([&] {
    checkpoint::ParameterLoader loader(reader);
    ParameterRequest request{
        "embedding.word_embeddings.weight", {20, 32}, ShardSpec::along(0), 0, 1, at::kDouble};
    loader.local_value(request);
    loader.finish();
  });
  EXPECT_EQ(shape.rfind(step + "/manifest.json: embedding.word_embeddings.weight: the checkpoint "
                               "has shape [20, 16], the model expects [20, 32]",
                        0),
            0u)
      << shape;

  // A manifest entry whose piece the file lacks.
  nlohmann::json manifest = reader.manifest();
  manifest["files"][1]["entries"][0]["storage"] = "no-such-tensor";
  files::write_atomically(step + "/manifest.json", manifest.dump());
  const std::string absent = error_of([&] { checkpoint::Reader r(c.save_checkpoint); });
  EXPECT_EQ(absent, rank1 + ": embedding.word_embeddings.weight: missing from the file " +
                        "(manifest.json lists it as \"no-such-tensor\")");
}

}  // namespace
}  // namespace parity
