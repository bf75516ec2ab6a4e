// Megatron-LM legacy checkpoints as --load-weights reads them
// (harness/model/megatron_checkpoint.h over harness/base/torch_save.h), on the
// committed fixtures of tools/megatron/make_checkpoint_fixtures.py
// (tests/fixtures/checkpoints/: real torch.save files holding what Megatron-LM
// writes: argparse args, numpy RNG state, OrderedDict state dicts with
// `_extra_state`): every layout loads as the full weights, bit for bit, at any TP
// size; every bad folder is one line naming the folder or file, the value and
// the rule. Real Megatron Core's checkpoints: tests/megatron/checkpoint_live.sh.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "harness/backend/registry.h"
#include "harness/base/files.h"
#include "harness/base/safetensors.h"
#include "harness/model/gpt_model.h"
#include "harness/model/loaded_batch.h"
#include "harness/model/loaded_weights.h"

namespace parity {
namespace {

// __FILE__ is absolute, or (ccache's base_dir) relative to the build folder,
// the parent of the tests' working directory.
std::string fixture(const std::string& name) {
  const std::string here = __FILE__;
  const std::string path = here.substr(0, here.rfind('/')) + "/../fixtures/checkpoints/" + name;
  return path[0] == '/' || files::exists(path) ? path : "../" + path;
}

// The model of tests/fixtures/checkpoints/REGENERATE.md.
ModelConfig fixture_model(bool untie = true) {
  ModelConfig c;
  c.hidden = 8;
  c.heads = 2;
  c.ffn_hidden = 8;
  c.layers = 4;
  c.seq = 8;
  c.vocab = 16;
  c.micro_batch = 2;
  c.activation = ActivationKind::swiglu;
  c.position_embedding = PositionEmbeddingKind::rope;
  c.untie_embeddings = untie;
  c.seed = 99;  // not the fixture's seed: every value must come from the files
  return c;
}

// Every parameter of the model built from `path` equals the one built from the
// full weights, bit for bit; and every TP 2 shard the source gives equals the
// full tensor's shard.
// A tied model (untie false) is compared with the full weights without their
// output layer.
void expect_loads_as_full_weights(const std::string& path, bool untie = true) {
  ASSERT_TRUE(files::exists(fixture("full.safetensors"))) << fixture("full.safetensors");
  auto backend = make_backend("reference");
  const files::TempDir dir("parity-ckpt");
  NamedTensors full_weights;
  for (auto& [name, t] : read_tensor_file(fixture("full.safetensors")))
    if (untie || name != "output_layer.weight") full_weights.emplace_back(name, t);
  safetensors::write_file(dir.path() + "/full.safetensors", full_weights);
  LoadedWeights full(dir.path() + "/full.safetensors");
  GPTModel want(fixture_model(untie), *backend, ParallelContext::single(), &full);
  LoadedWeights loaded(path);
  GPTModel got(fixture_model(untie), *backend, ParallelContext::single(), &loaded);
  ASSERT_EQ(got.parameters().size(), want.parameters().size());
  for (std::size_t i = 0; i < want.parameters().size(); ++i) {
    const Parameter& w = want.parameters()[i];
    const Parameter& g = got.parameters()[i];
    ASSERT_EQ(g.name, w.name);
    EXPECT_TRUE(at::equal(g.value, w.value)) << path << ": " << w.name;
    for (int r = 0; r < 2; ++r) {
      ParameterRequest req{w.name, w.value.sizes().vec(), w.shard, r, 2, at::kFloat};
      EXPECT_TRUE(at::equal(loaded.local_value(req), shard_of(w.value.detach(), w.shard, r, 2)))
          << path << ": " << w.name << " TP rank " << r << " of 2";
    }
  }
}

std::string load_error(const std::string& path, bool untie = true) {
  auto backend = make_backend("reference");
  try {
    LoadedWeights w(path);
    GPTModel m(fixture_model(untie), *backend, ParallelContext::single(), &w);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(MegatronCheckpoint, Tp2Pp2WithVirtualStagesLoadsAsTheFullWeights) {
  // Through the tracker file, and the iteration folder itself.
  expect_loads_as_full_weights(fixture("tp2_pp2_vpp2"));
  expect_loads_as_full_weights(fixture("tp2_pp2_vpp2/iter_0000020"));
  const LoadedWeights w(fixture("tp2_pp2_vpp2"));
  EXPECT_EQ(w.files().size(), 2u);  // one per TP rank of the files
  EXPECT_NE(w.description().find("iteration 20, TP 2 x PP 2, 2 model chunks, layers numbered by "
                                 "its args' pipeline layout"),
            std::string::npos)
      << w.description();
}

TEST(MegatronCheckpoint, UnevenStagesAreNumberedFromTheArgsOrFromTheLayerCounts) {
  // Layers 3 + 1 over two stages, tied embeddings: the last stage's
  // output_layer.weight is their copy, skipped by a tied model and taken as the
  // output layer by an untied one.
  expect_loads_as_full_weights(fixture("pp2_uneven/iter_0000005"), /*untie=*/false);
  EXPECT_NE(LoadedWeights(fixture("pp2_uneven/iter_0000005"))
                .description()
                .find("layers numbered by its args' pipeline layout"),
            std::string::npos);
  expect_loads_as_full_weights(fixture("pp2_no_args/iter_0000005"), /*untie=*/false);
  EXPECT_NE(LoadedWeights(fixture("pp2_no_args/iter_0000005"))
                .description()
                .find("layers numbered by the files' layer counts"),
            std::string::npos);
  EXPECT_EQ(load_error(fixture("pp2_uneven/iter_0000005"), /*untie=*/true).find("output_layer"),
            std::string::npos);  // an untied model takes the copy as its output layer
}

TEST(MegatronCheckpoint, ArgsThatContradictTheFilesAreOneLine) {
  const std::string e = load_error(fixture("pp2_bad_args/iter_0000005"), false);
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  EXPECT_NE(e.find("mp_rank_00_000/model_optim_rng.pt: holds 3 decoder layer(s) and 0 MTP "
                   "depth(s); its args (4 layers over PP 2 x VPP 1) place 2 and 0 there"),
            std::string::npos)
      << e;
}

TEST(MegatronCheckpoint, AReleaseCheckpointLoadsFromItsFolderItsRankFolderOrItsFile) {
  expect_loads_as_full_weights(fixture("tp1_release"));
  expect_loads_as_full_weights(fixture("tp1_release/release/mp_rank_00"));
  expect_loads_as_full_weights(fixture("tp1_release/release/mp_rank_00/model_optim_rng.pt"));
  // model.state_dict() saved alone: an OrderedDict with _metadata and `_extra_state`
  // entries (None, io.BytesIO), which LibTorch's own unpickler could not build.
  expect_loads_as_full_weights(fixture("state_dict.pt"));
}

TEST(MegatronCheckpoint, OneRankFileOfALargerLayoutSaysToGiveTheFolder) {
  const std::string file = fixture("tp2_pp2_vpp2/iter_0000020/mp_rank_01_000/model_optim_rng.pt");
  EXPECT_EQ(load_error(file), file +
                                  ": one rank's file of a TP 2 x PP 2 checkpoint (its args): give "
                                  "the checkpoint or iteration folder that holds every mp_rank "
                                  "folder");
}

// A copy of a fixture folder to break.
std::string copy_of(const std::string& name, const files::TempDir& dir) {
  const std::string to = dir.path() + "/" + name;
  const std::string command = "cp -r '" + fixture(name) + "' '" + to + "'";
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  return to;
}

void write(const std::string& path, const std::string& text) {
  files::write_atomically(path, text);
}

TEST(MegatronCheckpoint, EveryBadFolderIsOneLineNamingItAndTheRule) {
  const files::TempDir dir("parity-ckpt");
  const std::string c = copy_of("tp2_pp2_vpp2", dir);
  const std::string tracker = c + "/latest_checkpointed_iteration.txt";
  const auto expect_error = [&](const std::string& path, const std::string& want) {
    const std::string e = load_error(path);
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    EXPECT_NE(e.find(want), std::string::npos) << e;
  };
  write(tracker, "twenty\n");
  expect_error(c, tracker + ": 'twenty': expected an iteration number or 'release'");
  write(tracker, "30");
  expect_error(c, tracker + ": names '30', but " + c + "/iter_0000030 does not exist");
  files::remove_tree(tracker);
  expect_error(
      c, c + ": has no latest_checkpointed_iteration.txt: give one iteration folder, e.g. " + c +
             "/iter_0000020");
  write(tracker, "20");

  const std::string iter = c + "/iter_0000020";
  files::remove_tree(iter + "/mp_rank_01_001/model_optim_rng.pt");
  expect_error(c, iter + "/mp_rank_01_001/model_optim_rng.pt: no such file");
  files::remove_tree(iter + "/mp_rank_01_001");
  expect_error(c, iter +
                      ": mp_rank_01_001 is missing (the folder holds TP ranks up to 1 and PP "
                      "ranks up to 1)");
  files::create_directories(iter + "/mp_rank_01_001_002");
  expect_error(c, iter + ": mixes mp_rank folders of different layouts");

  const std::string ep = dir.path() + "/ep";
  files::create_directories(ep + "/mp_rank_00_000_001");
  expect_error(ep,
               "an expert-parallel rank's folder (mp_rank_TP_PP_EP), which parity does not "
               "read: save with --ckpt-format torch_dist and convert it");

  const std::string dist = dir.path() + "/dist";
  files::create_directories(dist);
  write(dist + "/.metadata", "x");
  expect_error(dist, dist +
                         ": a Megatron Core distributed checkpoint (torch_dist: .metadata and "
                         "__*.distcp files), which parity does not read: convert it with "
                         "tools/megatron/convert_torch_dist.py SCENARIO.json " +
                         dist + " OUT.safetensors");

  const std::string empty = dir.path() + "/empty";
  files::create_directories(empty);
  expect_error(empty, empty + ": a folder that is not a Megatron-LM checkpoint");
  write(empty + "/weights.safetensors", "");
  expect_error(empty, "; for a parity --dump folder give " + empty + "/weights.safetensors");

  const std::string text_rank = dir.path() + "/text/mp_rank_00";
  files::create_directories(text_rank);
  write(text_rank + "/model_optim_rng.pt", "step loss\n");
  expect_error(dir.path() + "/text",
               text_rank +
                   "/model_optim_rng.pt: text beginning \"step loss\", expected "
                   "Megatron-LM's model_optim_rng.pt (a torch.save zip file)");
}

TEST(MegatronCheckpoint, ACheckpointIsNotABatchAndTheBatchErrorSaysWhatTheFileHolds) {
  const std::string file = fixture("tp1_release/release/mp_rank_00/model_optim_rng.pt");
  try {
    LoadedBatch batch(file, 2, 8, 2, 16);
    FAIL() << "a checkpoint read as a batch";
  } catch (const std::exception& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    EXPECT_NE(what.find(file + ": a torch.save (zip) file holding a dict of no tensors (keys "
                               "'args', 'checkpoint_version', 'iteration', 'model', "),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("a Megatron-LM checkpoint, its tensors under \"model\""), std::string::npos)
        << what;
  }
}

}  // namespace
}  // namespace parity
