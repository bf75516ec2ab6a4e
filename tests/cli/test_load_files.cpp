// parity run --load-weights / --load-batch end to end (docs/weights.md): weights
// and batch written from a seeded single-rank model reproduce its run bit for bit
// at tp=1 and within fp32 tolerance under TP2+SP, CP2 and DP2; bad files exit 2
// with one line naming the key and both shapes.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "harness/backend/registry.h"
#include "harness/base/files.h"
#include "harness/base/safetensors.h"
#include "harness/cli/cli.h"
#include "harness/config/model_mapping.h"
#include "harness/driver/run_dump.h"
#include "harness/model/gpt_model.h"
#include "harness/trace/trace_reader.h"
#include "tests/support/command_line.h"
#include "tests/support/tensor_compare.h"

namespace parity::cli {
namespace {

struct Outcome {
  int code = -1;
  std::string err;
  nlohmann::json step0;  // rank 0's first step
};

Outcome run(std::vector<std::string> a, const std::string& report) {
  a.insert(a.begin(), {"run", "--steps", "1", "--report", report});
  Outcome o;
  std::string out;
  o.code = testing::run_parity(std::move(a), &out, &o.err);
  if (o.code == kExitOk)
    o.step0 =
        nlohmann::json::parse(files::read(report).value())["launch"]["results"][0]["steps"][0];
  return o;
}

// The seeded default model's weights and `microbatches` global microbatches of its batch.
void write_reference_files(const std::string& dir, int microbatches) {
  RunConfig rc;
  auto backend = make_backend("reference");
  GPTModel model(model_config_from(rc), *backend, ParallelContext::single());
  std::vector<std::pair<std::string, at::Tensor>> w;
  for (const Parameter& p : model.parameters()) w.emplace_back(p.name, p.value.detach());
  safetensors::write_file(dir + "/w.safetensors", w);
  std::vector<at::Tensor> tokens, labels;
  for (int g = 0; g < microbatches; ++g) {
    const MicrobatchData d = microbatch_data(rc.seed, g, rc.seq, rc.micro_batch, rc.vocab);
    tokens.push_back(d.tokens.t());
    labels.push_back(d.labels.t());
  }
  safetensors::write_file(dir + "/b.safetensors",
                          {{"tokens", at::cat(tokens)}, {"labels", at::cat(labels)}});
}

TEST(LoadFiles, DumpedWeightsAndBatchReproduceTheSeededRun) {
  const files::TempDir dir("parity-load");
  write_reference_files(dir.path(), 4);
  const std::string w = dir.path() + "/w.safetensors", b = dir.path() + "/b.safetensors";
  const std::string r = dir.path() + "/r.json";
  const Outcome seeded = run({"--microbatches", "4"}, r);
  ASSERT_EQ(seeded.code, kExitOk) << seeded.err;
  // Another seed: every value now comes from the files.
  const Outcome loaded =
      run({"--microbatches", "4", "--seed", "99", "--load-weights", w, "--load-batch", b}, r);
  ASSERT_EQ(loaded.code, kExitOk) << loaded.err;
  EXPECT_EQ(loaded.step0["loss"], seeded.step0["loss"]);
  EXPECT_EQ(loaded.step0["logits_digest"], seeded.step0["logits_digest"]);
  EXPECT_EQ(loaded.step0["grad_digest"], seeded.step0["grad_digest"]);
  const Outcome other_seed = run({"--microbatches", "4", "--seed", "99"}, r);
  EXPECT_NE(other_seed.step0["loss"], seeded.step0["loss"]);  // the files mattered

  const double loss = seeded.step0["loss"].get<double>();
  const std::vector<std::vector<std::string>> layouts = {
      {"--tp", "2", "--sp", "--microbatches", "4"},
      {"--cp", "2", "--microbatches", "4"},
      {"--dp", "2", "--microbatches", "2"},
  };
  for (std::vector<std::string> layout : layouts) {
    layout.insert(layout.end(), {"--seed", "99", "--load-weights", w, "--load-batch", b});
    const Outcome o = run(layout, r);
    ASSERT_EQ(o.code, kExitOk) << layout[0] << ": " << o.err;
    EXPECT_NEAR(o.step0["loss"].get<double>(), loss, 1e-5 * std::abs(loss)) << layout[0];
    for (const auto& [name, norm] : seeded.step0["grad_norms"].items()) {
      if (layout[0] == "--tp") break;  // TP ranks hold shards: their norms are partial
      EXPECT_NEAR(o.step0["grad_norms"][name].get<double>(), norm.get<double>(),
                  1e-4 * norm.get<double>())
          << layout[0] << " " << name;
    }
  }
}

TEST(LoadFiles, BadFilesExit2WithOneLinePerProblem) {
  const files::TempDir dir("parity-load");
  write_reference_files(dir.path(), 2);
  const std::string w = dir.path() + "/w.safetensors", r = dir.path() + "/r.json";
  // A model with another hidden size: every shape differs; a few examples and a count.
  Outcome o = run({"--hidden", "32", "--load-weights", w}, r);
  EXPECT_EQ(o.code, kExitBadInput);
  EXPECT_NE(o.err.find("--load-weights " + w +
                       ": embedding.word_embeddings.weight: the file has shape "
                       "[128, 64], the model expects [128, 32]\n"),
            std::string::npos)
      << o.err;
  EXPECT_NE(o.err.find("more problem(s) like these"), std::string::npos) << o.err;
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 4) << o.err;
  // One more layer: its parameters are missing.
  o = run({"--layers", "3", "--load-weights", w}, r);
  EXPECT_EQ(o.code, kExitBadInput);
  EXPECT_NE(o.err.find("decoder.layers.2.input_layernorm.weight: missing from the file (the "
                       "model expects shape [64])"),
            std::string::npos)
      << o.err;
  // One layer fewer: layer 1's are extra.
  o = run({"--layers", "1", "--load-weights", w}, r);
  EXPECT_EQ(o.code, kExitBadInput);
  EXPECT_NE(o.err.find("decoder.layers.1.input_layernorm.weight: in the file (shape [64]) but the "
                       "model has no such parameter"),
            std::string::npos)
      << o.err;
  // A corrupt file: says what it is and what was expected.
  files::write_atomically(dir.path() + "/bad.safetensors", std::string(12, '\xff'));
  o = run({"--load-weights", dir.path() + "/bad.safetensors"}, r);
  EXPECT_EQ(o.code, kExitBadInput);
  EXPECT_NE(o.err.find("binary data, expected a safetensors file or a torch.save (zip) file"),
            std::string::npos)
      << o.err;
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
  // A torn safetensors file (its data cut short) still gets the parser's reason.
  std::string torn = files::read(w).value();
  torn.resize(torn.size() / 2);
  files::write_atomically(dir.path() + "/torn.safetensors", torn);
  o = run({"--load-weights", dir.path() + "/torn.safetensors"}, r);
  EXPECT_EQ(o.code, kExitBadInput);
  EXPECT_EQ(o.err.find("expected a safetensors file"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("torn.safetensors"), std::string::npos) << o.err;
  // A text file (a loss table saved by mistake).
  files::write_atomically(dir.path() + "/notes.txt", "step  loss\n0  4.85\n");
  o = run({"--load-weights", dir.path() + "/notes.txt"}, r);
  EXPECT_EQ(o.code, kExitBadInput);
  EXPECT_NE(o.err.find("notes.txt: text beginning \"step  loss\", expected a safetensors file or a "
                       "torch.save (zip) file"),
            std::string::npos)
      << o.err;
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
  // A folder that is not a Megatron-LM checkpoint.
  o = run({"--load-weights", dir.path()}, r);
  EXPECT_EQ(o.code, kExitBadInput);
  EXPECT_NE(o.err.find(dir.path() + ": a folder that is not a Megatron-LM checkpoint (expected "
                                    "latest_checkpointed_iteration.txt, iter_NNNNNNN/"),
            std::string::npos)
      << o.err;
  // Tensors none of which is a parameter (a gradients file): one line, not one per tensor.
  std::vector<std::pair<std::string, at::Tensor>> grads;
  for (int i = 0; i < 40; ++i) grads.emplace_back("grad." + std::to_string(i), at::zeros({2}));
  safetensors::write_file(dir.path() + "/g.safetensors", grads);
  o = run({"--load-weights", dir.path() + "/g.safetensors"}, r);
  EXPECT_EQ(o.code, kExitBadInput);
  EXPECT_NE(o.err.find("none of its 40 tensors is a parameter of this model"), std::string::npos)
      << o.err;
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
  // A batch saved with torch.save is read like a weights file.
  o = run({"--load-batch", dir.path() + "/notes.txt"}, r);
  EXPECT_EQ(o.code, kExitBadInput);
  EXPECT_NE(o.err.find("text beginning"), std::string::npos) << o.err;
  // A batch for another global batch size.
  o = run({"--microbatches", "3", "--load-batch", dir.path() + "/b.safetensors"}, r);
  EXPECT_EQ(o.code, kExitBadInput);
  EXPECT_NE(o.err.find("--load-batch " + dir.path() + "/b.safetensors: " + dir.path() +
                       "/b.safetensors: tokens: shape [4, 16], expected int64 [rows, 16] with "
                       "rows a multiple of the global batch 6"),
            std::string::npos)
      << o.err;
}

// tests/fixtures/checkpoints (tools/megatron/make_checkpoint_fixtures.py). __FILE__
// is absolute, or (ccache's base_dir) relative to the build folder, the parent of
// the tests' working directory.
std::string checkpoint_fixture(const std::string& name) {
  const std::string here = __FILE__;
  const std::string path = here.substr(0, here.rfind('/')) + "/../fixtures/checkpoints/" + name;
  return path[0] == '/' || files::exists(path) ? path : "../" + path;
}

// A Megatron-LM legacy checkpoint at TP 2 x PP 2 x VPP 2 runs as its full
// weights do, bit for bit at TP 1 and at TP 2 (the same shards either way); a
// torch.save batch loads as its safetensors twin; a torch_dist folder is one
// line naming the converter.
TEST(LoadFiles, AMegatronCheckpointFolderRunsAsItsFullWeights) {
  const files::TempDir dir("parity-load");
  const std::string r = dir.path() + "/r.json";
  const std::vector<std::string> model = {"--layers",
                                          "4",
                                          "--hidden",
                                          "8",
                                          "--heads",
                                          "2",
                                          "--ffn-hidden",
                                          "8",
                                          "--seq",
                                          "8",
                                          "--vocab",
                                          "16",
                                          "--activation",
                                          "swiglu",
                                          "--position-embedding",
                                          "rope",
                                          "--micro-batch",
                                          "2",
                                          "--microbatches",
                                          "1",
                                          "--seed",
                                          "99",
                                          "--load-batch",
                                          checkpoint_fixture("batch.pt")};
  const auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), model.begin(), model.end());
    return run(extra, r);
  };
  for (const std::vector<std::string>& layout :
       {std::vector<std::string>{"--tp", "1"}, std::vector<std::string>{"--tp", "2", "--sp"}}) {
    std::vector<std::string> full = layout, ckpt = layout;
    full.insert(full.end(), {"--load-weights", checkpoint_fixture("full.safetensors")});
    ckpt.insert(ckpt.end(), {"--load-weights", checkpoint_fixture("tp2_pp2_vpp2")});
    const Outcome a = with(full), b = with(ckpt);
    ASSERT_EQ(a.code, kExitOk) << a.err;
    ASSERT_EQ(b.code, kExitOk) << b.err;
    EXPECT_EQ(b.step0["loss"], a.step0["loss"]) << layout[1];
    EXPECT_EQ(b.step0["logits_digest"], a.step0["logits_digest"]) << layout[1];
    EXPECT_EQ(b.step0["grad_digest"], a.step0["grad_digest"]) << layout[1];
  }
  files::create_directories(dir.path() + "/dist");
  files::write_atomically(dir.path() + "/dist/.metadata", "x");
  const Outcome o = with({"--load-weights", dir.path() + "/dist"});
  EXPECT_EQ(o.code, kExitBadInput);
  EXPECT_NE(o.err.find("--load-weights " + dir.path() + "/dist: " + dir.path() +
                       "/dist: a Megatron Core distributed checkpoint (torch_dist"),
            std::string::npos)
      << o.err;
  EXPECT_NE(o.err.find("tools/megatron/convert_torch_dist.py"), std::string::npos) << o.err;
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
}

}  // namespace
}  // namespace parity::cli

namespace parity::cli {
namespace {

safetensors::Contents dumped(const std::string& dir, const std::string& file) {
  return safetensors::read_file(dir + "/" + file);
}

using testing::max_rel;

TEST(Dump, ReloadingADumpReproducesItAndShardedRunsDumpTheSameFullTensors) {
  const files::TempDir dir("parity-dump");
  const std::string d1 = dir.path() + "/d1", r = dir.path() + "/r.json";
  ASSERT_EQ(run({"--dump", d1}, r).code, kExitOk);
  for (const char* f : {"weights.safetensors", "batch.safetensors", "logits.safetensors",
                        "loss.safetensors", "grads.safetensors", "manifest.json", "trace.jsonl"})
    EXPECT_TRUE(files::exists(d1 + "/" + f)) << f;
  EXPECT_FALSE(files::exists(d1 + ".partial"));
  const nlohmann::json manifest = nlohmann::json::parse(files::read(d1 + "/manifest.json").value());
  EXPECT_EQ(manifest["files"]["logits.safetensors"]["tensors"]["logits"]["shape"],
            (std::vector<int>{4, 16, 128}));
  EXPECT_EQ(manifest["scenario"]["dump"], d1);

  // Reload at tp=1 with another seed: bit for bit.
  const std::string d2 = dir.path() + "/d2";
  ASSERT_EQ(run({"--seed", "7", "--load-weights", d1 + "/weights.safetensors", "--load-batch",
                 d1 + "/batch.safetensors", "--dump", d2},
                r)
                .code,
            kExitOk);
  for (const char* f : {"weights.safetensors", "batch.safetensors", "logits.safetensors",
                        "loss.safetensors", "grads.safetensors"})
    EXPECT_EQ(max_rel(dumped(d2, f), dumped(d1, f)), 0.0) << f;

  // Loaded unsharded into TP2+SP, CP2, DP2: the gathered tensors agree within fp32 tolerance.
  const std::vector<std::vector<std::string>> layouts = {
      {"--tp", "2", "--sp"}, {"--cp", "2"}, {"--dp", "2", "--microbatches", "1"}};
  for (std::vector<std::string> layout : layouts) {
    const std::string d3 = dir.path() + "/d3";
    layout.insert(layout.end(), {"--load-weights", d1 + "/weights.safetensors", "--load-batch",
                                 d1 + "/batch.safetensors", "--dump", d3});
    ASSERT_EQ(run(layout, r).code, kExitOk) << layout[0];
    EXPECT_EQ(max_rel(dumped(d3, "weights.safetensors"), dumped(d1, "weights.safetensors")), 0.0);
    EXPECT_LT(max_rel(dumped(d3, "logits.safetensors"), dumped(d1, "logits.safetensors")), 1e-5)
        << layout[0];
    EXPECT_LT(max_rel(dumped(d3, "loss.safetensors"), dumped(d1, "loss.safetensors")), 1e-5)
        << layout[0];
    EXPECT_LT(max_rel(dumped(d3, "grads.safetensors"), dumped(d1, "grads.safetensors")), 1e-4)
        << layout[0];
  }
}

// The whole command line (no implicit flags); processes mode re-executes the parity binary.
int run_exact(std::vector<std::string> a, std::string* err) {
  LaunchOptions options;
  options.worker_executable = PARITY_EXECUTABLE;
  std::string out;
  return testing::run_parity(std::move(a), &out, err, options);
}

// Every rank's observations file holds exactly its step 0 records of trace.jsonl, keyed
// observation_key(seq, site), each tensor with the record's shape, dtype, digest and
// statistics (recomputed here from the loaded values); the manifest lists each file.
// Returns the observations of every rank by file name.
std::map<std::string, safetensors::Contents> expect_observations_match_trace(
    const std::string& dump, int world, const std::string& what) {
  const nlohmann::json manifest =
      nlohmann::json::parse(files::read(dump + "/manifest.json").value());
  const std::vector<TraceLine> trace = read_trace_file(dump + "/trace.jsonl");
  std::map<std::string, safetensors::Contents> all;
  EXPECT_FALSE(files::exists(dump + "/" + observations_file_name(world))) << what;
  for (int rank = 0; rank < world; ++rank) {
    const std::string file = observations_file_name(rank);
    SCOPED_TRACE(what + ", " + file);
    if (!files::exists(dump + "/" + file)) {
      ADD_FAILURE() << "missing";
      continue;
    }
    const safetensors::Contents c = safetensors::read_file(dump + "/" + file);
    const nlohmann::json& listed = manifest["files"][file]["tensors"];
    EXPECT_EQ(listed.size(), c.tensors.size());
    std::size_t step0 = 0, steps_after = 0;
    for (const TraceLine& line : trace) {
      const TraceRecord& r = line.record;
      if (r.rank != rank) continue;
      if (r.step != 0) {
        ++steps_after;
        EXPECT_EQ(c.find(observation_key(r.seq, r.site)), nullptr) << "step " << r.step;
        continue;
      }
      ++step0;
      const std::string key = observation_key(r.seq, r.site);
      const at::Tensor* t = c.find(key);
      if (t == nullptr) {
        ADD_FAILURE() << key << " missing";
        continue;
      }
      EXPECT_EQ(t->sizes().vec(), r.shape) << key;
      EXPECT_EQ(dtype_name(t->scalar_type()), r.dtype) << key;
      EXPECT_EQ(tensor_digest(*t), r.digest) << key;
      const TensorSummary sum = summarize(*t);
      EXPECT_EQ(sum.numel, r.summary.numel) << key;
      EXPECT_EQ(sum.sum, r.summary.sum) << key;
      EXPECT_EQ(sum.max, r.summary.max) << key;
      EXPECT_EQ(listed[key]["shape"], r.shape) << key;
      EXPECT_EQ(listed[key]["dtype"], safetensors::dtype_name(t->scalar_type())) << key;
    }
    // 2 microbatches x (6 x 2 layers + 1) records per step.
    EXPECT_EQ(step0, 26u);
    EXPECT_EQ(steps_after, 26u);
    EXPECT_EQ(c.tensors.size(), step0);  // nothing but step 0's records
    all.emplace(file, c);
  }
  return all;
}

TEST(Dump, EveryRankWritesItsObservationsMatchingItsTraceRecords) {
  const files::TempDir dir("parity-dump-obs");
  const std::vector<std::vector<std::string>> layouts = {{"--tp", "2", "--sp"}, {"--cp", "2"}};
  for (const std::vector<std::string>& layout : layouts) {
    const std::string what = layout[0];
    const auto dump_to = [&](const std::string& d) {
      std::vector<std::string> a = {"run", "--steps", "2", "--microbatches", "2", "--dump", d};
      a.insert(a.end(), layout.begin(), layout.end());
      return a;
    };
    const std::string d = dir.path() + "/d";
    std::string err;
    ASSERT_EQ(run_exact(dump_to(d), &err), kExitOk) << what << ": " << err;
    const auto threads = expect_observations_match_trace(d, 2, what);
    ASSERT_EQ(threads.size(), 2u) << what;
    // The ranks observed different shards: their files differ.
    const safetensors::Contents& r0 = threads.at(observations_file_name(0));
    const safetensors::Contents& r1 = threads.at(observations_file_name(1));
    ASSERT_EQ(r0.tensors.size(), r1.tensors.size());
    bool any_differs = false;
    for (std::size_t i = 0; i < r0.tensors.size(); ++i)
      any_differs = any_differs || !at::equal(r0.tensors[i].second, r1.tensors[i].second);
    EXPECT_TRUE(any_differs) << what;

    // Processes mode: the ranks' results travel as JSON; the same files, bit for bit.
    const std::string p = dir.path() + "/p";
    std::vector<std::string> processes = dump_to(p);
    processes.insert(processes.end(), {"--launch", "processes", "--timeout", "30"});
    ASSERT_EQ(run_exact(processes, &err), kExitOk) << what << " processes: " << err;
    const auto from_processes = expect_observations_match_trace(p, 2, what + " processes");
    ASSERT_EQ(from_processes.size(), 2u) << what;
    for (const auto& [file, c] : threads) {
      ASSERT_EQ(from_processes.count(file), 1u) << file;
      const safetensors::Contents& q = from_processes.at(file);
      ASSERT_EQ(q.tensors.size(), c.tensors.size()) << file;
      for (std::size_t i = 0; i < c.tensors.size(); ++i) {
        EXPECT_EQ(q.tensors[i].first, c.tensors[i].first) << file;
        EXPECT_TRUE(at::equal(q.tensors[i].second, c.tensors[i].second))
            << file << " " << c.tensors[i].first;
      }
    }
  }
}

}  // namespace
}  // namespace parity::cli
