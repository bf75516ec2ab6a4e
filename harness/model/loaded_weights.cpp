#include "harness/model/loaded_weights.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "harness/base/file_kind.h"
#include "harness/base/files.h"
#include "harness/base/shape_text.h"
#include "harness/base/torch_save.h"
#include "harness/model/megatron_checkpoint.h"

namespace parity {
namespace {

bool ignored(const std::string& name) {
  const std::string suffix = "_extra_state";
  return name.size() >= suffix.size() &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string join(const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& l : lines) s += (s.empty() ? "" : "; ") + l;
  return s;
}

// The shape of TP rank r's shard (every rank's is the same: shard_of splits evenly).
std::vector<std::int64_t> shard_shape(std::vector<std::int64_t> full, const ShardSpec& spec,
                                      int tp_size) {
  if (!spec.replicated() && full[static_cast<std::size_t>(spec.dim)] % tp_size == 0)
    full[static_cast<std::size_t>(spec.dim)] /= tp_size;
  return full;
}

bool has(const std::string& name, const char* part) { return name.find(part) != std::string::npos; }

// The attention options that change a checkpoint's shapes: linear_qkv's rows
// are (heads + 2 * groups) * head_dim, linear_proj takes heads * head_dim
// inputs, the q/k norms have head_dim weights.
std::string attention_shape_hint(const std::string& name, const std::vector<std::int64_t>& file,
                                 const std::vector<std::int64_t>& model) {
  if (file.size() != model.size() || file.empty()) return "";
  const bool rows_only = std::equal(file.begin() + 1, file.end(), model.begin() + 1);
  if (has(name, ".linear_qkv.") && rows_only)
    return " (linear_qkv has (heads + 2 * num_query_groups) * head_dim rows: does the model use "
           "--num-query-groups or --kv-channels?)";
  if (has(name, ".linear_proj.weight") && file.size() == 2 && file[0] == model[0])
    return " (linear_proj takes heads * head_dim inputs: does the model use --kv-channels?)";
  if (has(name, "_layernorm.") && (has(name, ".q_layernorm.") || has(name, ".k_layernorm.")))
    return " (the q/k norms have head_dim weights: does the model use --kv-channels?)";
  return "";
}

// A q/k norm weight in one of the checkpoint and the model only.
std::string qk_norm_hint(const std::string& name) {
  return has(name, ".q_layernorm.") || has(name, ".k_layernorm.")
             ? " (does the model use --qk-layernorm?)"
             : "";
}

}  // namespace

WeightsError::WeightsError(std::string path, std::vector<std::string> problems)
    : std::runtime_error(path + ": " + join(problems)),
      path_(std::move(path)),
      problems_(std::move(problems)) {}

LoadedWeights::LoadedWeights(const std::string& path) : path_(path), description_(path) {
  const auto adopt = [&](MegatronCheckpoint c) {
    description_ = c.description;
    output_layer_copy_possible_ = c.output_layer_on_another_stage;
    for (std::size_t t = 0; t < c.tp_ranks.size(); ++t)
      add_file(c.tp_sources[t], std::move(c.tp_ranks[t]));
  };
  if (files::is_directory(path)) {
    adopt(read_megatron_folder(path));
    return;
  }
  if (files::exists(path)) {
    if (files::exists(path + ".tp0"))
      throw WeightsError(path, {"both " + path + " (unsharded) and " + path +
                                ".tp0 (per TP rank) exist: remove or rename one"});
    std::string why;
    std::optional<std::string> bytes = files::read_file(path, &why);
    if (!bytes) throw TensorFileError(path + ": " + why);
    if (!is_zip(*bytes)) {
      add_file(path, parse_tensor_file(std::move(*bytes), path));
      return;
    }
    const TorchSaveFile file(std::move(*bytes), path);
    if (is_megatron_checkpoint(file.root()))
      adopt(read_megatron_file(file));
    else
      add_file(path, top_level_tensors(file));
    return;
  }
  std::vector<std::string> per_rank;
  for (int r = 0; files::exists(path + ".tp" + std::to_string(r)); ++r)
    per_rank.push_back(path + ".tp" + std::to_string(r));
  if (per_rank.empty())
    throw TensorFileError(path + ": no such file or folder (nor per-TP-rank files " + path +
                          ".tp0, ...)");
  for (const std::string& f : per_rank) add_file(f, read_tensor_file(f));
}

void LoadedWeights::add_file(const std::string& source, NamedTensors tensors) {
  NamedTensors kept;
  std::set<std::string> seen;
  for (std::pair<std::string, at::Tensor>& entry : tensors) {
    const std::string& name = entry.first;
    if (ignored(name)) continue;
    if (!seen.insert(name).second) throw WeightsError(source, {name + ": given twice"});
    kept.emplace_back(name, std::move(entry.second));
  }
  files_.push_back(source);
  ranks_.push_back(std::move(kept));
}

// Under pipeline parallelism Megatron's last stage holds its own output_layer.weight
// even when the embeddings are tied (kept equal to the first stage's embeddings):
// a model that ties them (asks for the embeddings and no output layer) skips that
// copy when every file's equals its embeddings.
void LoadedWeights::skip_tied_output_copy() {
  const std::string output = "output_layer.weight", embedding = "embedding.word_embeddings.weight";
  if (!output_layer_copy_possible_ || used_.count(output) || !used_.count(embedding)) return;
  for (std::size_t f = 0; f < ranks_.size(); ++f) {
    const at::Tensor* copy = find(f, output);
    const at::Tensor* original = find(f, embedding);
    if (copy == nullptr || original == nullptr || copy->sizes() != original->sizes() ||
        !at::equal(*copy, *original))
      return;
  }
  used_.insert(output);
}

const at::Tensor* LoadedWeights::find(std::size_t file, const std::string& name) const {
  for (const auto& [n, t] : ranks_[file])
    if (n == name) return &t;
  return nullptr;
}

at::Tensor LoadedWeights::local_value(const ParameterRequest& r) {
  used_.insert(r.name);
  const auto placeholder = [&] {
    return at::zeros(shard_shape(r.full_shape, r.shard, r.tp_size), at::TensorOptions(r.dtype));
  };
  const int k = static_cast<int>(files_.size());
  const std::vector<std::int64_t> expected = shard_shape(r.full_shape, r.shard, k);
  std::vector<at::Tensor> shards;
  bool ok = true;
  for (int f = 0; f < k; ++f) {
    const std::string where =
        k == 1 ? r.name : r.name + " (" + files_[static_cast<std::size_t>(f)] + ")";
    const at::Tensor* t = find(static_cast<std::size_t>(f), r.name);
    if (t == nullptr) {
      problems_.push_back(where + ": missing from the file (the model expects shape " +
                          shape_text(expected) + ")" + qk_norm_hint(r.name));
      ok = false;
      continue;
    }
    if (!r.shard.replicated() && k > 1 &&
        r.full_shape[static_cast<std::size_t>(r.shard.dim)] % (r.shard.parts * k) != 0) {
      problems_.push_back(where + ": dim " + std::to_string(r.shard.dim) + " of the full shape " +
                          shape_text(r.full_shape) + " cannot be split over " + std::to_string(k) +
                          " per-rank files");
      ok = false;
      continue;
    }
    if (t->sizes().vec() != expected) {
      problems_.push_back(where + ": the file has shape " + shape_text(t->sizes()) +
                          ", the model expects " + shape_text(expected) +
                          (k > 1 ? " (its shard of " + shape_text(r.full_shape) + " over " +
                                       std::to_string(k) + " TP ranks)"
                                 : "") +
                          attention_shape_hint(r.name, t->sizes().vec(), expected));
      ok = false;
      continue;
    }
    if (!at::isFloatingType(t->scalar_type())) {
      problems_.push_back(where + ": dtype " + std::string(c10::toString(t->scalar_type())) +
                          " is not a floating type");
      ok = false;
      continue;
    }
    shards.push_back(*t);
  }
  if (!ok) return placeholder();
  // A replicated parameter must be the same in every rank's file.
  if (r.shard.replicated())
    for (int f = 1; f < k; ++f)
      if (!at::equal(shards[static_cast<std::size_t>(f)], shards[0])) {
        problems_.push_back(r.name + ": replicated over TP, but " +
                            files_[static_cast<std::size_t>(f)] + " holds different values than " +
                            files_[0]);
        return placeholder();
      }
  const at::Tensor full = k == 1 ? shards[0] : unshard(shards, r.shard);
  return shard_of(full.to(r.dtype), r.shard, r.tp_rank, r.tp_size);
}

void LoadedWeights::held_elsewhere(const std::string& name) { used_.insert(name); }

void LoadedWeights::held_elsewhere_under(const std::string& prefix) {
  elsewhere_prefixes_.push_back(prefix);
}

bool LoadedWeights::accounted_for(const std::string& name) const {
  if (used_.count(name)) return true;
  for (const std::string& p : elsewhere_prefixes_)
    if (name.compare(0, p.size(), p) == 0) return true;
  return false;
}

void LoadedWeights::finish() {
  skip_tied_output_copy();
  // A file that shares no name with the model is another kind of file (a
  // gradients dump, another model's checkpoint): one line says so instead of
  // one line per tensor.
  std::size_t matched = 0, total = 0;
  std::string first_name;
  for (const NamedTensors& file : ranks_)
    for (const auto& [name, t] : file) {
      ++total;
      matched += accounted_for(name) ? 1 : 0;
      if (first_name.empty()) first_name = name;
    }
  if (total > 0 && matched == 0) {
    std::string example;
    for (const std::string& name : used_) {
      example = name;
      break;
    }
    throw WeightsError(path_, {"none of its " + std::to_string(total) +
                               " tensors is a parameter of this model (the file has '" +
                               first_name + "', the model '" + example +
                               "'): is it a weights file? (a --dump's weights.safetensors is; "
                               "its gradients file is not)"});
  }
  for (std::size_t f = 0; f < ranks_.size(); ++f)
    for (const auto& [name, t] : ranks_[f])
      if (!accounted_for(name))
        problems_.push_back(name + (files_.size() > 1 ? " (" + files_[f] + ")" : "") +
                            ": in the file (shape " + shape_text(t.sizes()) +
                            ") but the model has no such parameter" + qk_norm_hint(name));
  if (!problems_.empty()) throw WeightsError(path_, problems_);
}

}  // namespace parity
