#include "harness/model/megatron_checkpoint.h"

#include <algorithm>
#include <map>
#include <optional>
#include <unordered_map>

#include "harness/base/file_kind.h"
#include "harness/base/files.h"
#include "harness/base/torch_save.h"
#include "harness/model/pipeline_layout.h"

namespace parity {
namespace {

using pickle::Value;
using Kind = Value::Kind;

[[noreturn]] void fail(const std::string& line) { throw TensorFileError(line); }

std::string padded(std::int64_t n, int width) {
  std::string s = std::to_string(n);
  return std::string(s.size() < static_cast<std::size_t>(width) ? width - s.size() : 0, '0') + s;
}

// The fields of Megatron-LM's args (an argparse.Namespace) this reader uses;
// absent or None: nullopt.
struct Args {
  bool present = false;
  std::optional<std::int64_t> tp, pp, vpp, ep, num_layers, first_stage_layers, last_stage_layers,
      mtp_layers;
  std::optional<bool> account_for_embedding, account_for_loss;
  std::optional<std::string> layout;
  bool layout_unreadable = false;  // not a str (a PipelineParallelLayerLayout object)
};

Args args_of(const Value& root) {
  Args a;
  const Value* ns = root.get("args");
  if (ns == nullptr || ns->kind != Kind::object || ns->state == nullptr ||
      ns->state->kind != Kind::dict)
    return a;
  a.present = true;
  const auto integer = [&](const char* key) -> std::optional<std::int64_t> {
    const Value* v = ns->get(key);
    if (v != nullptr && v->kind == Kind::integer) return v->integer;
    return std::nullopt;
  };
  const auto boolean = [&](const char* key) -> std::optional<bool> {
    const Value* v = ns->get(key);
    if (v != nullptr && v->kind == Kind::boolean) return v->boolean;
    return std::nullopt;
  };
  a.tp = integer("tensor_model_parallel_size");
  a.pp = integer("pipeline_model_parallel_size");
  a.vpp = integer("virtual_pipeline_model_parallel_size");
  a.ep = integer("expert_model_parallel_size");
  a.num_layers = integer("num_layers");
  a.first_stage_layers = integer("decoder_first_pipeline_num_layers");
  a.last_stage_layers = integer("decoder_last_pipeline_num_layers");
  a.mtp_layers = integer("mtp_num_layers");
  a.account_for_embedding = boolean("account_for_embedding_in_pipeline_split");
  a.account_for_loss = boolean("account_for_loss_in_pipeline_split");
  if (const Value* l = ns->get("pipeline_model_parallel_layout")) {
    if (l->kind == Kind::string)
      a.layout = l->text;
    else if (l->kind != Kind::none)
      a.layout_unreadable = true;
  }
  return a;
}

// One rank's model_optim_rng.pt: its model chunks' tensors.
struct RankFile {
  std::string path;
  int tp = 0, pp = 0;
  std::vector<NamedTensors> chunks;  // "model", or "model0", "model1", ...
  Args args;
  std::optional<std::int64_t> iteration;
};

RankFile rank_file(const TorchSaveFile& file) {
  const Value& root = file.root();
  RankFile r;
  r.path = file.source();
  if (!is_megatron_checkpoint(root))
    fail(r.path + ": a torch.save (zip) file " + describe_torch_save_root(root) +
         ", expected a Megatron-LM checkpoint (a dict with a \"model\" entry)");
  const auto chunk = [&](const std::string& key, const Value& v) {
    if (v.kind != Kind::dict)
      fail(r.path + ": \"" + key + "\" is " + v.kind_name() + ", expected a state dict");
    r.chunks.push_back(file.tensors_of(v));
  };
  if (const Value* model = root.get("model")) {
    if (root.get("model0") != nullptr)
      fail(r.path +
           ": holds both \"model\" and \"model0\" (one model, or one entry per virtual "
           "stage)");
    chunk("model", *model);
  } else {
    for (int v = 0;; ++v) {
      const Value* m = root.get("model" + std::to_string(v));
      if (m == nullptr) break;
      chunk("model" + std::to_string(v), *m);
    }
  }
  r.args = args_of(root);
  if (const Value* it = root.get("iteration"); it != nullptr && it->kind == Kind::integer)
    r.iteration = it->integer;
  return r;
}

RankFile read_rank_file(const std::string& path) {
  std::string why;
  std::optional<std::string> bytes = files::read_file(path, &why);
  if (!bytes) fail(path + ": " + why);
  if (!is_zip(*bytes))
    fail(path + ": " + files::describe_content(*bytes) +
         ", expected Megatron-LM's model_optim_rng.pt (a torch.save zip file)");
  return rank_file(TorchSaveFile(std::move(*bytes), path));
}

// "decoder.layers.<n>." and "mtp.layers.<n>.": the local number, or -1.
int local_number(const std::string& name, const std::string& prefix) {
  if (name.compare(0, prefix.size(), prefix) != 0) return -1;
  const std::size_t dot = name.find('.', prefix.size());
  if (dot == std::string::npos || dot == prefix.size() || dot - prefix.size() > 6) return -1;
  int n = 0;
  for (std::size_t i = prefix.size(); i < dot; ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    n = n * 10 + (name[i] - '0');
  }
  return n;
}

const std::string kDecoder = "decoder.layers.";
const std::string kMtp = "mtp.layers.";

struct LayerCounts {
  int decoder = 0, mtp = 0;
  bool operator==(const LayerCounts& o) const { return decoder == o.decoder && mtp == o.mtp; }
};

LayerCounts count_layers(const NamedTensors& tensors) {
  LayerCounts c;
  for (const auto& entry : tensors) {
    c.decoder = std::max(c.decoder, local_number(entry.first, kDecoder) + 1);
    c.mtp = std::max(c.mtp, local_number(entry.first, kMtp) + 1);
  }
  return c;
}

std::string renumbered(const std::string& name, const LayerCounts& offset) {
  for (const auto& [prefix, add] : {std::pair{&kDecoder, offset.decoder}, {&kMtp, offset.mtp}}) {
    const int n = local_number(name, *prefix);
    if (n < 0) continue;
    return *prefix + std::to_string(n + add) + name.substr(name.find('.', prefix->size()));
  }
  return name;
}

std::string chunk_name(const RankFile& f, int v) {
  return f.chunks.size() == 1 ? f.path : f.path + " model" + std::to_string(v);
}

// The layer offsets of chunk v of stage p, from the args' pipeline layout
// (checked against the files' counts) or from the counts alone: Megatron
// places the layers contiguously in chunk order (v-major, stage-minor).
std::vector<std::vector<LayerCounts>> layer_offsets(const std::vector<const RankFile*>& stage_files,
                                                    int vpp, bool* from_args) {
  const int pp = static_cast<int>(stage_files.size());
  std::vector<std::vector<LayerCounts>> counts(pp), offsets(pp);
  for (int p = 0; p < pp; ++p)
    for (int v = 0; v < vpp; ++v) counts[p].push_back(count_layers(stage_files[p]->chunks[v]));
  const Args& a = stage_files[0]->args;
  PipelineLayoutConfig c;
  *from_args = a.present && a.num_layers && !a.layout_unreadable;
  if (*from_args) {
    c.num_layers = static_cast<int>(*a.num_layers);
    c.pp = pp;
    c.vpp = vpp;
    if (a.first_stage_layers) c.first_stage_layers = static_cast<int>(*a.first_stage_layers);
    if (a.last_stage_layers) c.last_stage_layers = static_cast<int>(*a.last_stage_layers);
    c.account_for_embedding = a.account_for_embedding.value_or(false);
    c.account_for_loss = a.account_for_loss.value_or(false);
    c.layout = a.layout.value_or("");
    c.mtp_layers = static_cast<int>(a.mtp_layers.value_or(0));
    // A layout parity's rules reject (or another Megatron version's) falls back to the counts.
    *from_args = validate_pipeline_layout(c).empty();
  }
  LayerCounts running;
  for (int v = 0; v < vpp; ++v)
    for (int p = 0; p < pp; ++p) {
      const LayerCounts& n = counts[p][v];
      if (*from_args) {
        const LayerCounts want{num_layers_to_build(c, v, p), num_mtp_layers_to_build(c, v, p)};
        if (!(n == want))
          fail(chunk_name(*stage_files[p], v) + ": holds " + std::to_string(n.decoder) +
               " decoder layer(s) and " + std::to_string(n.mtp) + " MTP depth(s); its args (" +
               std::to_string(c.num_layers) + " layers over PP " + std::to_string(pp) + " x VPP " +
               std::to_string(vpp) + ") place " + std::to_string(want.decoder) + " and " +
               std::to_string(want.mtp) + " there");
        offsets[p].push_back({layer_offset(c, v, p), mtp_layer_offset(c, v, p)});
      } else {
        offsets[p].push_back(running);
        running.decoder += n.decoder;
        running.mtp += n.mtp;
      }
    }
  return offsets;
}

// files[t * pp + p]: TP rank t, stage p.
MegatronCheckpoint assemble(const std::string& where, const std::vector<RankFile>& files, int tp,
                            int pp) {
  const RankFile& first = files[0];
  const Args& a = first.args;
  const int vpp = static_cast<int>(first.chunks.size());
  for (const RankFile& f : files)
    if (f.chunks.size() != first.chunks.size())
      fail(f.path + ": holds " + std::to_string(f.chunks.size()) + " model chunk(s), " +
           first.path + " holds " + std::to_string(vpp));
  const auto layout_text = [&] {
    return "the folder holds TP " + std::to_string(tp) + " x PP " + std::to_string(pp) +
           " rank files with " + std::to_string(vpp) + " model chunk(s) each";
  };
  if (a.tp && *a.tp != tp)
    fail(first.path + ": args tensor_model_parallel_size = " + std::to_string(*a.tp) + ", but " +
         layout_text());
  if (a.pp && *a.pp != pp)
    fail(first.path + ": args pipeline_model_parallel_size = " + std::to_string(*a.pp) + ", but " +
         layout_text());
  if (a.present && a.vpp.value_or(1) != vpp)
    fail(first.path + ": args virtual_pipeline_model_parallel_size = " +
         (a.vpp ? std::to_string(*a.vpp) : std::string("None")) + ", but " + layout_text());

  // Every TP rank's stage holds the same layers.
  for (int t = 1; t < tp; ++t)
    for (int p = 0; p < pp; ++p)
      for (int v = 0; v < vpp; ++v) {
        const RankFile& f = files[static_cast<std::size_t>(t) * pp + p];
        const RankFile& f0 = files[static_cast<std::size_t>(p)];
        const LayerCounts n = count_layers(f.chunks[v]), n0 = count_layers(f0.chunks[v]);
        if (!(n == n0))
          fail(chunk_name(f, v) + ": holds " + std::to_string(n.decoder) + " decoder layer(s), " +
               chunk_name(f0, v) + " holds " + std::to_string(n0.decoder));
      }
  std::vector<const RankFile*> stage_files;
  stage_files.reserve(static_cast<std::size_t>(pp));
  for (int p = 0; p < pp; ++p) stage_files.push_back(&files[static_cast<std::size_t>(p)]);
  bool from_args = false;
  const std::vector<std::vector<LayerCounts>> offsets =
      pp * vpp > 1 ? layer_offsets(stage_files, vpp, &from_args)
                   : std::vector<std::vector<LayerCounts>>{{LayerCounts{}}};

  MegatronCheckpoint out;
  for (int t = 0; t < tp; ++t) {
    NamedTensors merged;
    std::unordered_map<std::string, std::string> source_of;
    for (int p = 0; p < pp; ++p) {
      const RankFile& f = files[static_cast<std::size_t>(t) * pp + p];
      for (int v = 0; v < vpp; ++v)
        for (const auto& [name, tensor] : f.chunks[v]) {
          std::string global = renumbered(name, offsets[p][v]);
          const auto [it, fresh] = source_of.emplace(global, chunk_name(f, v));
          if (!fresh)
            fail(global + ": in both " + it->second + " and " + chunk_name(f, v) +
                 (global == name ? "" : " (as " + name + ")"));
          merged.emplace_back(std::move(global), tensor);
        }
    }
    out.tp_ranks.push_back(std::move(merged));
    out.tp_sources.push_back(
        tp * pp == 1 ? first.path : where + "/mp_rank_" + padded(t, 2) + (pp > 1 ? "_*" : ""));
  }
  out.output_layer_on_another_stage = pp * vpp > 1;
  out.description = where + " (a Megatron-LM legacy checkpoint" +
                    (first.iteration ? ", iteration " + std::to_string(*first.iteration) : "") +
                    ", TP " + std::to_string(tp) + " x PP " + std::to_string(pp) +
                    (vpp > 1 ? ", " + std::to_string(vpp) + " model chunks" : "") +
                    (pp * vpp == 1 ? ""
                     : from_args   ? ", layers numbered by its args' pipeline layout"
                                   : ", layers numbered by the files' layer counts") +
                    ")";
  return out;
}

std::string iteration_folder(const std::string& dir, const std::string& tracker) {
  std::string why;
  const std::optional<std::string> text = files::read_file(tracker, &why);
  if (!text) fail(tracker + ": " + why);
  const std::size_t b = text->find_first_not_of(" \t\r\n");
  const std::size_t e = text->find_last_not_of(" \t\r\n");
  const std::string value = b == std::string::npos ? "" : text->substr(b, e - b + 1);
  std::string folder;
  if (value == "release") {
    folder = dir + "/release";
  } else {
    const bool digits =
        !value.empty() && value.size() <= 12 &&
        std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits)
      fail(tracker + ": '" + value.substr(0, 40) +
           "': expected an iteration number or 'release' (Megatron-LM's tracker file)");
    folder = dir + "/iter_" + padded(std::stoll(value), 7);
  }
  if (!files::is_directory(folder))
    fail(tracker + ": names '" + value + "', but " + folder + " does not exist");
  return folder;
}

// mp_rank_XX, mp_rank_XX_YYY, mp_rank_XX_YYY_ZZZ: the numbers, or nullopt.
std::optional<std::vector<int>> mp_rank_numbers(const std::string& name) {
  const std::string prefix = "mp_rank_";
  if (name.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  std::vector<int> numbers;
  std::size_t i = prefix.size();
  while (true) {
    const std::size_t end = std::min(name.find('_', i), name.size());
    const std::string part = name.substr(i, end - i);
    if (part.empty() || part.size() > 6 ||
        !std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return std::nullopt;
    numbers.push_back(std::stoi(part));
    if (end == name.size()) break;
    i = end + 1;
  }
  if (numbers.size() > 3) return std::nullopt;
  return numbers;
}

}  // namespace

bool is_megatron_checkpoint(const pickle::Value& root) {
  if (root.kind != Kind::dict) return false;
  const Value* model = root.get("model");
  if (model == nullptr) model = root.get("model0");
  return model != nullptr && model->kind == Kind::dict;
}

MegatronCheckpoint read_megatron_file(const TorchSaveFile& file) {
  std::vector<RankFile> files;
  files.push_back(rank_file(file));
  const Args& a = files[0].args;
  if (a.tp.value_or(1) * a.pp.value_or(1) > 1)
    fail(file.source() + ": one rank's file of a TP " + std::to_string(a.tp.value_or(1)) +
         " x PP " + std::to_string(a.pp.value_or(1)) +
         " checkpoint (its args): give the checkpoint or iteration folder that holds every "
         "mp_rank folder");
  return assemble(file.source(), files, 1, 1);
}

MegatronCheckpoint read_megatron_folder(const std::string& path) {
  std::string dir = path;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const std::string tracker = dir + "/latest_checkpointed_iteration.txt";
  const std::string where = files::exists(tracker) ? iteration_folder(dir, tracker) : dir;
  const std::optional<std::vector<std::string>> names = files::list_directory(where);
  if (!names) fail(where + ": cannot list the folder");
  const auto has = [&](const std::string& n) {
    return std::find(names->begin(), names->end(), n) != names->end();
  };
  if (has(".metadata"))
    fail(where +
         ": a Megatron Core distributed checkpoint (torch_dist: .metadata and __*.distcp files), "
         "which parity does not read: convert it with tools/megatron/convert_torch_dist.py "
         "SCENARIO.json " +
         where + " OUT.safetensors (Megatron Core's own dist_checkpointing.load) and load that");
  std::map<std::pair<int, int>, std::string> ranks;  // (tp, pp or ep) -> folder
  std::size_t parts = 0;
  for (const std::string& n : *names) {
    const std::optional<std::vector<int>> numbers = mp_rank_numbers(n);
    if (!numbers || !files::is_directory(where + "/" + n)) continue;
    if (parts != 0 && numbers->size() != parts)
      fail(where + ": mixes mp_rank folders of different layouts (" + ranks.begin()->second +
           " and " + n + ")");
    parts = numbers->size();
    if (parts == 3)
      fail(where + "/" + n +
           ": an expert-parallel rank's folder (mp_rank_TP_PP_EP), which parity does not read: "
           "save with --ckpt-format torch_dist and convert it (tools/megatron/README.md)");
    ranks[{(*numbers)[0], parts == 2 ? (*numbers)[1] : 0}] = n;
  }
  if (ranks.empty()) {
    if (has("model_optim_rng.pt")) {
      std::vector<RankFile> one{read_rank_file(where + "/model_optim_rng.pt")};
      const Args& a = one[0].args;
      if (a.tp.value_or(1) * a.pp.value_or(1) > 1)
        fail(where + ": one rank's folder of a TP " + std::to_string(a.tp.value_or(1)) + " x PP " +
             std::to_string(a.pp.value_or(1)) +
             " checkpoint (its args): give the checkpoint or iteration folder");
      return assemble(where, one, 1, 1);
    }
    const auto iter = std::find_if(names->begin(), names->end(), [](const std::string& n) {
      return n.rfind("iter_", 0) == 0 || n == "release";
    });
    if (iter != names->end())
      fail(dir + ": has no latest_checkpointed_iteration.txt: give one iteration folder, e.g. " +
           dir + "/" + *iter);
    fail(where +
         ": a folder that is not a Megatron-LM checkpoint (expected "
         "latest_checkpointed_iteration.txt, iter_NNNNNNN/, mp_rank_XX/, model_optim_rng.pt or a "
         "torch_dist .metadata)" +
         (has("weights.safetensors")
              ? "; for a parity --dump folder give " + where + "/weights.safetensors"
              : std::string()));
  }
  int tp = 0, pp = 0;
  for (const auto& [key, folder] : ranks) {
    tp = std::max(tp, key.first + 1);
    pp = std::max(pp, key.second + 1);
  }
  std::vector<RankFile> rank_files;
  for (int t = 0; t < tp; ++t)
    for (int p = 0; p < pp; ++p) {
      const auto it = ranks.find({t, p});
      if (it == ranks.end())
        fail(where + ": mp_rank_" + padded(t, 2) + (parts == 2 ? "_" + padded(p, 3) : "") +
             " is missing (the folder holds TP ranks up to " + std::to_string(tp - 1) +
             (parts == 2 ? " and PP ranks up to " + std::to_string(pp - 1) : "") + ")");
      const std::string file = where + "/" + it->second + "/model_optim_rng.pt";
      if (!files::exists(file))
        fail(file + ": no such file (every mp_rank folder holds its rank's model_optim_rng.pt)");
      rank_files.push_back(read_rank_file(file));
      rank_files.back().tp = t;
      rank_files.back().pp = p;
      // mp_rank_XX_YYY is TP x PP, or TP x EP without pipeline parallelism.
      const Args& a = rank_files.front().args;
      if (parts == 2 && a.pp.value_or(2) == 1 && a.ep.value_or(1) > 1)
        fail(where + "/" + it->second +
             ": an expert-parallel rank's folder (args expert_model_parallel_size = " +
             std::to_string(*a.ep) +
             ", pipeline_model_parallel_size = 1), which parity does not read: save with "
             "--ckpt-format torch_dist and convert it (tools/megatron/README.md)");
    }
  return assemble(where, rank_files, tp, pp);
}

}  // namespace parity
