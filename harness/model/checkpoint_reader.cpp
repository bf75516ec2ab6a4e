// Loading a checkpoint (checkpoint.h): the manifest and the rank files checked
// piece by piece, every full tensor assembled from its main replicas, the
// distributed optimizer's flat shards regrouped by their FlatShard ranges, and
// what a rank of any layout takes from them.
#include <ATen/ATen.h>

#include <algorithm>
#include <cstdlib>
#include <numeric>

#include "harness/base/files.h"
#include "harness/base/shape_text.h"
#include "harness/faults/code_path_faults.h"
#include "harness/model/checkpoint.h"
#include "harness/model/moe_layer.h"

PARITY_USES_FAULT(replica_saved_per_rank);
PARITY_USES_FAULT(reshard_flat_buffer_order);

namespace parity::checkpoint {

namespace {

// The region `offset` + `shape` of `full` (a view).
at::Tensor region(const at::Tensor& full, const std::vector<std::int64_t>& offset,
                  const std::vector<std::int64_t>& shape) {
  at::Tensor r = full;
  for (std::size_t d = 0; d < offset.size(); ++d)
    r = r.narrow(static_cast<std::int64_t>(d), offset[d], shape[d]);
  return r;
}

bool inside(const std::vector<std::int64_t>& offset, const std::vector<std::int64_t>& shape,
            const std::vector<std::int64_t>& global) {
  if (offset.size() != global.size() || shape.size() != global.size()) return false;
  for (std::size_t d = 0; d < global.size(); ++d)
    if (offset[d] < 0 || shape[d] < 0 || offset[d] + shape[d] > global[d]) return false;
  return true;
}

std::string resolve_folder(const std::string& path) {
  if (files::exists(path + "/manifest.json")) return path;
  const std::string tracker = path + "/" + kTrackerFile;
  if (!files::is_directory(path)) throw CheckpointError(path + ": no such folder");
  const std::optional<std::string> text = files::read(tracker);
  if (!text)
    throw CheckpointError(path + ": not a parity checkpoint (neither " + kTrackerFile +
                          " nor manifest.json; parity run --save-checkpoint writes them)");
  char* end = nullptr;
  const long long step = std::strtoll(text->c_str(), &end, 10);
  if (end == text->c_str() || step < 0 || (*end != '\0' && *end != '\n'))
    throw CheckpointError(tracker + ": expected a step number, found \"" + text->substr(0, 40) +
                          "\"");
  std::string folder = path + "/" + step_folder_name(step);
  if (!files::exists(folder + "/manifest.json"))
    throw CheckpointError(tracker + ": names step " + std::to_string(step) + ", but " + folder +
                          "/manifest.json is missing");
  return folder;
}

// A piece read from a rank file, for the assembly.
struct Stored {
  std::string file;
  Entry entry;
  at::Tensor data;
};

// The full tensor of one key from its main replicas: each element exactly
// once. Fault replica-saved-per-rank: overlapping main replicas are summed.
at::Tensor assemble(const std::string& key, const std::vector<Stored>& pieces,
                    const std::string& manifest) {
  const std::vector<std::int64_t>& shape = pieces.front().entry.global_shape;
  at::Tensor full = at::zeros(shape, pieces.front().data.options());
  at::Tensor count = at::zeros(shape, at::kInt);
  const bool sum_overlaps = fault_active(fault_replica_saved_per_rank);
  for (const Stored& p : pieces) {
    if (p.entry.global_shape != shape)
      throw CheckpointError(manifest + ": " + key + ": global shape " +
                            shape_text(p.entry.global_shape) + " in " + p.file + ", " +
                            shape_text(shape) + " in " + pieces.front().file);
    if (p.entry.replica_id != 0 || p.entry.storage.empty()) continue;
    at::Tensor seen = region(count, p.entry.global_offset, p.entry.local_shape);
    at::Tensor into = region(full, p.entry.global_offset, p.entry.local_shape);
    if (seen.max().item<int>() > 0 && !sum_overlaps)
      throw CheckpointError(p.file + ": " + key + ": its piece at " +
                            shape_text(p.entry.global_offset) +
                            " overlaps another main replica's (two ranks wrote the same elements)");
    if (sum_overlaps)
      into.add_(p.data.to(full.scalar_type()));
    else
      into.copy_(p.data);
    seen.add_(1);
  }
  const std::int64_t missing = (count == 0).sum().item<std::int64_t>();
  if (missing > 0)
    throw CheckpointError(manifest + ": " + key + ": " + std::to_string(missing) + " of " +
                          std::to_string(count.numel()) +
                          " elements are in no main replica's piece (a rank file's pieces are "
                          "missing)");
  return full;
}

}  // namespace

std::int64_t saved_step(const std::string& path) {
  const std::string manifest = resolve_folder(path) + "/manifest.json";
  try {
    return nlohmann::json::parse(files::read(manifest).value_or("")).at("step").get<std::int64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(manifest + ": malformed: " + e.what());
  }
}

Reader::Reader(const std::string& path) : folder_(resolve_folder(path)) {
  const std::string manifest_path = folder_ + "/manifest.json";
  const std::optional<std::string> text = files::read(manifest_path);
  if (!text) throw CheckpointError(manifest_path + ": cannot read");
  std::map<std::string, std::vector<Stored>> by_key;
  try {
    manifest_ = nlohmann::json::parse(*text);
    if (!manifest_.is_object() || manifest_.value("format", "") != kFormat)
      throw CheckpointError(manifest_path +
                            ": not a parity checkpoint manifest (\"format\" is not \"" + kFormat +
                            "\")");
    if (manifest_.at("version").get<int>() != kVersion)
      throw CheckpointError(manifest_path + ": version " + manifest_["version"].dump() +
                            ", this parity reads version " + std::to_string(kVersion));
    (void)step();
    for (const nlohmann::json& n : manifest_.at("parameters"))
      parameters_.push_back(n.get<std::string>());
    for (const auto& [id, j] : manifest_.at("flat_buffers").items())
      flat_[id] = flat_buffer_from_json(id, j);
    for (const nlohmann::json& f : manifest_.at("files")) {
      const std::string file = folder_ + "/" + f.at("file").get<std::string>();
      std::vector<Entry> entries;
      for (const nlohmann::json& e : f.at("entries")) entries.push_back(entry_from_json(e));
      if (!files::exists(file)) {
        std::string held;
        for (const Entry& e : entries)
          if (!e.storage.empty() && held.empty()) held = e.key;
        throw CheckpointError(file + ": missing" +
                              (held.empty()
                                   ? std::string()
                                   : " (it holds " + held + " and " +
                                         std::to_string(entries.size() - 1) + " more pieces)"));
      }
      safetensors::Contents contents;
      try {
        contents = safetensors::read_file(file);
      } catch (const safetensors::FormatError& e) {
        throw CheckpointError(e.what());
      }
      for (const Entry& e : entries) {
        if (!inside(e.global_offset, e.local_shape, e.global_shape))
          throw CheckpointError(manifest_path + ": " + e.key + ": a piece at " +
                                shape_text(e.global_offset) + " of shape " +
                                shape_text(e.local_shape) + " lies outside " +
                                shape_text(e.global_shape));
        if (e.storage.empty()) {
          by_key[e.key].push_back({file, e, at::Tensor()});
          continue;
        }
        const at::Tensor* t = contents.find(e.storage);
        if (t == nullptr)
          throw CheckpointError(file + ": " + e.key + ": missing from the file (manifest.json " +
                                "lists it as \"" + e.storage + "\")");
        if (t->sizes().vec() != e.local_shape)
          throw CheckpointError(file + ": " + e.key + ": shape " + shape_text(t->sizes()) +
                                " in the file, manifest.json says " + shape_text(e.local_shape));
        if (safetensors::dtype_name(t->scalar_type()) != e.dtype)
          throw CheckpointError(file + ": " + e.key + ": dtype " +
                                safetensors::dtype_name(t->scalar_type()) +
                                " in the file, manifest.json says " + e.dtype);
        by_key[e.key].push_back({file, e, *t});
      }
      RngSnapshot rng;
      for (const nlohmann::json& name : f.value("rng", nlohmann::json::array())) {
        const at::Tensor* t = contents.find(name.get<std::string>());
        if (t == nullptr)
          throw CheckpointError(file + ": " + name.get<std::string>() + ": missing from the file");
        const at::Tensor bytes = t->contiguous();
        const auto* begin = static_cast<const std::uint8_t*>(bytes.data_ptr());
        rng.states.emplace_back(begin, begin + bytes.numel());
      }
      if (!rng.states.empty()) rng_[f.at("rank").get<int>()] = std::move(rng);
    }
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(manifest_path + ": malformed: " + e.what());
  }
  for (auto& [key, pieces] : by_key) {
    // A key whose only pieces are replicas that wrote nothing is torn too.
    const bool any_stored =
        std::any_of(pieces.begin(), pieces.end(), [](const Stored& s) { return s.data.defined(); });
    if (!any_stored)
      throw CheckpointError(manifest_path + ": " + key + ": no rank wrote a piece of it");
    std::vector<Stored> stored;
    for (Stored& p : pieces)
      if (p.data.defined()) stored.push_back(std::move(p));
    full_[key] = assemble(key, stored, manifest_path);
  }
  for (const auto& [id, b] : flat_)
    for (const FlatParameter& p : b.parameters)
      if (p.offset < 0 || p.numel < 0 || p.offset + p.numel > b.shard * b.dp)
        throw CheckpointError(manifest_path + ": flat buffer " + id + ": " + p.key +
                              " lies outside its " + std::to_string(b.shard * b.dp) + " elements");
}

std::int64_t Reader::step() const { return manifest_.at("step").get<std::int64_t>(); }

const nlohmann::json& Reader::scenario() const { return manifest_.at("scenario"); }

const at::Tensor& Reader::full(const std::string& key) const {
  const auto it = full_.find(key);
  if (it == full_.end())
    throw CheckpointError(folder_ + "/manifest.json: " + key + ": not in the checkpoint");
  return it->second;
}

at::Tensor Reader::full_moment(const std::string& moment, const std::string& name) const {
  const std::string own = "optimizer." + moment + "." + name;
  if (has(own)) return full(own);
  const at::Tensor& value = full(name);
  at::Tensor out = at::zeros(value.sizes(), value.options());
  at::Tensor count = at::zeros(value.sizes(), at::kInt);
  bool held = false;
  for (const auto& [id, buffer] : flat_) {
    // Each parameter's place in the buffer. Fault reshard-flat-buffer-order:
    // the places taken in name order, not in the order the buffer was laid out.
    std::vector<std::int64_t> offsets;
    for (const FlatParameter& p : buffer.parameters) offsets.push_back(p.offset);
    if (fault_active(fault_reshard_flat_buffer_order)) {
      std::vector<std::size_t> order(buffer.parameters.size());
      std::iota(order.begin(), order.end(), std::size_t{0});
      // A lambda may not capture a structured binding (C++17): name the list.
      const std::vector<FlatParameter>& parameters = buffer.parameters;
      std::stable_sort(order.begin(), order.end(), [&parameters](std::size_t a, std::size_t b) {
        return parameters[a].key < parameters[b].key;
      });
      std::int64_t at = 0;
      for (std::size_t i : order) {
        offsets[i] = at;
        at += buffer.parameters[i].numel;
      }
    }
    for (std::size_t i = 0; i < buffer.parameters.size(); ++i) {
      const FlatParameter& p = buffer.parameters[i];
      if (p.key != name) continue;
      held = true;
      const at::Tensor local = full("optimizer.flat." + moment + "." + id)
                                   .narrow(0, offsets[i], p.numel)
                                   .view(p.local_shape);
      for (const Box& box : p.boxes) {
        // A TP replica sits in every TP rank's buffer: the first copy counts.
        at::Tensor seen = region(count, box.offset, box.shape);
        if (seen.max().item<int>() > 0) continue;
        region(out, box.offset, box.shape).copy_(piece_of(local, box));
        seen.add_(1);
      }
    }
  }
  if (!held)
    throw CheckpointError(folder_ + "/manifest.json: " + own +
                          ": not in the checkpoint (was it saved with --optimizer sgd?)");
  if ((count == 0).any().item<bool>())
    throw CheckpointError(folder_ + "/manifest.json: " + own +
                          ": the flat buffers hold only part of it");
  return out;
}

std::optional<RngSnapshot> Reader::rng(int rank) const {
  const auto it = rng_.find(rank);
  if (it == rng_.end()) return std::nullopt;
  return it->second;
}

// ------------------------------------------------------------------ ParameterLoader

at::Tensor ParameterLoader::local_value(const ParameterRequest& r) {
  asked_.push_back(r.name);
  const std::string where = reader_.folder() + "/manifest.json: " + r.name;
  const auto placeholder = [&] {
    return shard_of(at::zeros(r.full_shape, at::TensorOptions(r.dtype)), r.shard, r.tp_rank,
                    r.tp_size);
  };
  if (!reader_.has(r.name)) {
    problems_.push_back(where + ": missing from the checkpoint (the model expects shape " +
                        shape_text(r.full_shape) + ")");
    return placeholder();
  }
  const at::Tensor& full = reader_.full(r.name);
  if (full.sizes().vec() != r.full_shape) {
    problems_.push_back(where + ": the checkpoint has shape " + shape_text(full.sizes()) +
                        ", the model expects " + shape_text(r.full_shape));
    return placeholder();
  }
  return shard_of(full, r.shard, r.tp_rank, r.tp_size).to(r.dtype);
}

void ParameterLoader::held_elsewhere(const std::string& name) { asked_.push_back(name); }

void ParameterLoader::held_elsewhere_under(const std::string& prefix) {
  prefixes_.push_back(prefix);
}

void ParameterLoader::finish() {
  for (const std::string& name : reader_.parameter_names()) {
    bool accounted = std::find(asked_.begin(), asked_.end(), name) != asked_.end();
    for (const std::string& p : prefixes_) accounted = accounted || name.rfind(p, 0) == 0;
    if (!accounted)
      problems_.push_back(reader_.folder() + "/manifest.json: " + name +
                          ": in the checkpoint, but the model has no such parameter");
  }
  if (problems_.empty()) return;
  throw CheckpointError(problems_.front() +
                        (problems_.size() > 1
                             ? " (and " + std::to_string(problems_.size() - 1) + " more problems)"
                             : std::string()));
}

// ------------------------------------------------------------------ the rest of the state

void restore_buffers(const Reader& reader, GPTModel& model) {
  at::NoGradGuard no_grad;
  for (const TransformerLayer& layer : model.layers()) {
    if (!layer.moe()) continue;
    const at::Tensor& bias = layer.moe()->router().expert_bias();
    bias.copy_(reader.full(layer.moe()->router().canonical_name() + ".expert_bias"));
  }
}

void restore_optimizer(const Reader& reader, Optimizer& optimizer, GPTModel& model) {
  const nlohmann::json& saved = reader.manifest().at("optimizer");
  const std::string kind = saved.at("kind").get<std::string>();
  const std::vector<std::string>& moments = optimizer.moment_names();
  if (!moments.empty() && kind != to_string(optimizer.settings().kind))
    throw CheckpointError(reader.folder() + "/manifest.json: optimizer: saved by " + kind +
                          ", which keeps no " + std::string(to_string(optimizer.settings().kind)) +
                          " state");
  optimizer.set_steps(saved.at("step").get<std::int64_t>());
  at::NoGradGuard no_grad;
  const ParallelContext& par = model.parallel();
  const std::vector<Parameter>& params = model.parameters();
  const FlatShardLayout* layout = optimizer.layout();
  // The same buffer at the same DP size: this rank's flat shard as saved
  // (Megatron's load at an unchanged layout); otherwise every parameter's
  // state is regrouped from whatever the checkpoint holds.
  bool same_buffer = false;
  if (layout) {
    const auto it = reader.flat_buffers().find(buffer_id(par));
    if (it != reader.flat_buffers().end()) {
      const nlohmann::json saved_table = to_json(it->second);
      same_buffer = saved_table == to_json(flat_buffer_of(params, *layout, par));
    }
  }
  for (std::size_t m = 0; m < moments.size(); ++m) {
    if (same_buffer && optimizer.flat_moment(m).defined())
      optimizer.flat_moment(m).copy_(
          reader.full("optimizer.flat." + moments[m] + "." + buffer_id(par))
              .narrow(0, layout->shard_begin(), layout->shard_elements()));
    for (std::size_t i = 0; i < params.size(); ++i) {
      const bool flat = layout && layout->flat_offset(i) >= 0;
      if (flat && same_buffer) continue;
      const ShardGroup g = shard_group_of(params[i], par);
      const at::Tensor local =
          shard_of(reader.full_moment(moments[m], params[i].name), params[i].shard, g.rank, g.size);
      at::Tensor target = optimizer.moment(m, i);
      if (flat) {
        const FlatShardLayout::Range r = layout->owned(i);
        target.copy_(local.reshape({-1}).narrow(0, r.begin, r.size()));
      } else {
        target.copy_(local.view(target.sizes()));
      }
    }
  }
}

}  // namespace parity::checkpoint
