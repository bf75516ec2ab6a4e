// Saving a checkpoint (checkpoint.h): each rank's pieces, their replica ids
// from one gather of every rank's piece list, the files, the manifest, the
// publication by rename.
#include <ATen/ATen.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include "harness/base/files.h"
#include "harness/faults/code_path_faults.h"
#include "harness/model/checkpoint.h"
#include "harness/model/moe_layer.h"
#include "harness/parallel/byte_gather.h"

PARITY_USES_FAULT(replica_saved_per_rank);
PARITY_USES_FAULT(optimizer_step_not_saved);

namespace parity::checkpoint {

namespace {

struct Piece {
  Entry entry;
  at::Tensor data;
};

std::string join(const std::vector<std::int64_t>& v) {
  std::string out;
  for (std::int64_t x : v) out += (out.empty() ? "" : ",") + std::to_string(x);
  return out;
}

// The piece's identity among the ranks: the same key, offset and shape are replicas.
std::string identity(const Entry& e) {
  return e.key + "@" + join(e.global_offset) + "/" + join(e.local_shape);
}

void add_boxes(std::vector<Piece>& out, const std::string& key, const at::Tensor& local,
               const std::vector<std::int64_t>& full_shape, const ShardSpec& spec, int tp_rank,
               int tp_size) {
  for (const Box& box : tp_boxes(full_shape, spec, tp_rank, tp_size)) {
    Entry e;
    e.key = key;
    e.global_shape = full_shape;
    e.global_offset = box.offset;
    e.local_shape = box.shape;
    e.dtype = safetensors::dtype_name(local.scalar_type());
    out.push_back({std::move(e), piece_of(local.detach(), box).to(at::kCPU).contiguous()});
  }
}

// This rank's pieces: parameters, expert biases, the optimizer's moments.
std::vector<Piece> pieces_of(GPTModel& model, const Optimizer& optimizer) {
  const ParallelContext& par = model.parallel();
  std::vector<Piece> out;
  const std::vector<Parameter>& params = model.parameters();
  for (const Parameter& p : params) {
    const ShardGroup g = shard_group_of(p, par);
    add_boxes(out, p.name, p.value, full_shape_of(p, g.size), p.shard, g.rank, g.size);
  }
  for (const TransformerLayer& layer : model.layers())
    if (layer.moe()) {
      const at::Tensor& bias = layer.moe()->router().expert_bias();
      add_boxes(out, layer.moe()->router().canonical_name() + ".expert_bias", bias,
                bias.sizes().vec(), ShardSpec::replicate(), 0, 1);
    }
  const FlatShardLayout* layout = optimizer.layout();
  const std::vector<std::string>& moments = optimizer.moment_names();
  for (std::size_t m = 0; m < moments.size(); ++m) {
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (layout && layout->flat_offset(i) >= 0) continue;  // in the flat shard below
      const ShardGroup g = shard_group_of(params[i], par);
      add_boxes(out, "optimizer." + moments[m] + "." + params[i].name, optimizer.moment(m, i),
                full_shape_of(params[i], g.size), params[i].shard, g.rank, g.size);
    }
    if (layout && optimizer.flat_moment(m).defined()) {
      const std::int64_t shard = layout->shard_elements();
      Entry e;
      e.key = "optimizer.flat." + moments[m] + "." + buffer_id(par);
      e.global_shape = {shard * layout->dp_size()};
      e.global_offset = {layout->shard_begin()};
      e.local_shape = {shard};
      e.dtype = safetensors::dtype_name(optimizer.flat_moment(m).scalar_type());
      out.push_back({std::move(e), optimizer.flat_moment(m).to(at::kCPU).contiguous()});
    }
  }
  return out;
}

const char* const kRngNames[] = {"rng.data_parallel", "rng.model_parallel"};

nlohmann::json coordinates_of(const ParallelContext& par) {
  return {{"tp", par.tp_rank()},
          {"cp", par.cp_rank()},
          {"dp", par.dp_rank()},
          {"pp", par.pp_rank()},
          {"ep", par.ep_rank()}};
}

// Every rank's `mine` (this rank's included), in global rank order.
std::vector<nlohmann::json> gather_json(Communicator* world, const nlohmann::json& mine) {
  if (world == nullptr || world->size() == 1) return {mine};
  const std::string text = mine.dump();
  at::Tensor bytes = at::empty({static_cast<std::int64_t>(text.size())}, at::kByte);
  std::memcpy(bytes.data_ptr(), text.data(), text.size());
  std::vector<nlohmann::json> out;
  for (const at::Tensor& b : all_gather_bytes(*world, bytes))
    out.push_back(nlohmann::json::parse(
        std::string(static_cast<const char*>(b.data_ptr()), static_cast<std::size_t>(b.numel()))));
  return out;
}

void barrier(Communicator* world) {
  if (world != nullptr && world->size() > 1) world->barrier();
}

}  // namespace

std::string save(const SaveRequest& r, GPTModel& model, const Optimizer& optimizer) {
  const ParallelContext& par = model.parallel();
  std::vector<Piece> pieces = pieces_of(model, optimizer);
  nlohmann::json mine = {{"rank", r.rank}, {"coordinates", coordinates_of(par)}};
  nlohmann::json entries = nlohmann::json::array();
  for (const Piece& p : pieces) entries.push_back(to_json(p.entry));
  mine["entries"] = std::move(entries);
  mine["parameters"] = nlohmann::json::array();
  for (const Parameter& p : model.parameters()) mine["parameters"].push_back(p.name);
  if (optimizer.layout() && !optimizer.moment_names().empty())
    mine["flat_buffer"] = {
        {"id", buffer_id(par)},
        {"table", to_json(flat_buffer_of(model.parameters(), *optimizer.layout(), par))}};
  const std::vector<nlohmann::json> all = gather_json(r.world, mine);

  // Replica ids: a piece's index among the ranks holding the same piece, in
  // rank order; replica 0 writes it. Fault replica-saved-per-rank: every rank
  // takes itself for the writer.
  const bool every_rank_writes = fault_active(fault_replica_saved_per_rank);
  std::map<std::string, int> seen;
  nlohmann::json files = nlohmann::json::array();
  for (const nlohmann::json& rank : all) {
    nlohmann::json listed = nlohmann::json::array();
    for (const nlohmann::json& j : rank.at("entries")) {
      Entry e = entry_from_json(j);
      const int replica = seen[identity(e)]++;
      e.replica_id = every_rank_writes ? 0 : replica;
      e.storage = e.replica_id == 0 ? identity(e) : "";
      listed.push_back(to_json(e));
    }
    const int rank_id = rank.at("rank").get<int>();
    nlohmann::json rng = nlohmann::json::array();
    for (const char* name : kRngNames) rng.push_back(name);
    files.push_back({{"file", rank_file_name(rank_id)},
                     {"rank", rank_id},
                     {"coordinates", rank.at("coordinates")},
                     {"rng", rng},
                     {"entries", listed}});
    if (rank_id == r.rank)
      for (std::size_t i = 0; i < pieces.size(); ++i) pieces[i].entry = entry_from_json(listed[i]);
  }

  std::string final_folder = r.dir + "/" + step_folder_name(r.step);
  const std::string partial = final_folder + ".partial";
  if (r.rank == 0) {
    files::create_directories(r.dir);
    files::remove_tree(partial);  // a killed save's leftovers
    files::create_directories(partial);
  }
  barrier(r.world);

  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const Piece& p : pieces)
    if (!p.entry.storage.empty()) tensors.emplace_back(p.entry.storage, p.data);
  const RngSnapshot rng = model.rng_tracker().snapshot();
  for (std::size_t s = 0; s < rng.states.size() && s < std::size(kRngNames); ++s) {
    at::Tensor state = at::empty({static_cast<std::int64_t>(rng.states[s].size())}, at::kByte);
    std::memcpy(state.data_ptr(), rng.states[s].data(), rng.states[s].size());
    tensors.emplace_back(kRngNames[s], state);
  }
  safetensors::write_file(partial + "/" + rank_file_name(r.rank), tensors,
                          {{"format", kFormat}, {"rank", std::to_string(r.rank)}});
  if (r.after_write) r.after_write();
  barrier(r.world);

  if (r.rank == 0) {
    std::set<std::string> parameters;
    nlohmann::json flat = nlohmann::json::object();
    for (const nlohmann::json& rank : all) {
      for (const nlohmann::json& n : rank.at("parameters")) parameters.insert(n.get<std::string>());
      if (rank.contains("flat_buffer"))
        flat[rank["flat_buffer"]["id"].get<std::string>()] = rank["flat_buffer"]["table"];
    }
    const OptimizerSettings& o = optimizer.settings();
    const nlohmann::json manifest = {
        {"format", kFormat},
        {"version", kVersion},
        {"step", r.step},
        {"scenario", r.scenario},
        {"data", r.data},
        {"layout",
         {{"world", r.world ? r.world->size() : 1},
          {"tp", par.tp_size()},
          {"cp", par.cp_size()},
          {"dp", par.dp_size()},
          {"pp", par.pp_size()},
          {"ep", par.ep_size()}}},
        // Fault optimizer-step-not-saved: the optimizer's step count is lost.
        {"optimizer",
         {{"kind", std::string(to_string(o.kind))},
          {"lr", o.lr},
          {"beta1", o.beta1},
          {"beta2", o.beta2},
          {"eps", o.eps},
          {"distributed", o.distributed},
          {"step", fault_active(fault_optimizer_step_not_saved) ? 0 : optimizer.steps()}}},
        {"parameters", parameters},
        {"flat_buffers", flat},
        {"files", files}};
    files::write_atomically(partial + "/manifest.json", manifest.dump(1) + "\n");
    if (files::exists(final_folder) && !files::remove_tree(final_folder))
      throw CheckpointError(final_folder + ": cannot remove the earlier checkpoint of this step");
    if (std::rename(partial.c_str(), final_folder.c_str()) != 0)
      throw CheckpointError("cannot rename " + partial + " to " + final_folder + ": " +
                            std::strerror(errno));
    files::write_atomically(r.dir + "/" + kTrackerFile, std::to_string(r.step) + "\n");
  }
  barrier(r.world);
  return final_folder;
}

}  // namespace parity::checkpoint
