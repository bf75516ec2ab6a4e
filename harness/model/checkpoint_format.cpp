// The checkpoint's names, boxes and JSON forms (checkpoint.h).
#include <ATen/ATen.h>

#include <cstdio>

#include "harness/model/checkpoint.h"

namespace parity::checkpoint {

std::string step_folder_name(std::int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", static_cast<long long>(step));
  return buf;
}

std::string rank_file_name(int rank) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "rank%05d.safetensors", rank);
  return buf;
}

std::vector<Box> tp_boxes(const std::vector<std::int64_t>& full_shape, const ShardSpec& spec,
                          int tp_rank, int tp_size) {
  const std::vector<std::int64_t> zeros(full_shape.size(), 0);
  if (spec.replicated() || tp_size == 1) return {Box{zeros, full_shape, -1, 0}};
  // shard_of: the dim is `parts` blocks, each split into tp_size chunks; the
  // rank holds chunk tp_rank of every block, one after another.
  const std::int64_t block = full_shape.at(static_cast<std::size_t>(spec.dim)) / spec.parts;
  const std::int64_t chunk = block / tp_size;
  std::vector<Box> out;
  for (std::int64_t p = 0; p < spec.parts; ++p) {
    Box b{zeros, full_shape, spec.dim, p * chunk};
    b.offset[static_cast<std::size_t>(spec.dim)] = p * block + tp_rank * chunk;
    b.shape[static_cast<std::size_t>(spec.dim)] = chunk;
    out.push_back(std::move(b));
  }
  return out;
}

std::vector<std::int64_t> full_shape_of(const Parameter& p, int tp_size) {
  std::vector<std::int64_t> shape = p.value.sizes().vec();
  if (!p.shard.replicated() && tp_size > 1)
    shape.at(static_cast<std::size_t>(p.shard.dim)) *= tp_size;
  return shape;
}

ShardGroup shard_group_of(const Parameter& p, const ParallelContext& par) {
  if (p.expert >= 0) return {par.expert_tp_rank(), par.expert_tp_size()};
  return {par.tp_rank(), par.tp_size()};
}

std::string buffer_id(const ParallelContext& par) {
  return "tp" + std::to_string(par.tp_rank()) + ".pp" + std::to_string(par.pp_rank());
}

FlatBuffer flat_buffer_of(const std::vector<Parameter>& params, const FlatShardLayout& layout,
                          const ParallelContext& par) {
  FlatBuffer b;
  b.id = buffer_id(par);
  b.dp = layout.dp_size();
  b.shard = layout.shard_elements();
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (layout.flat_offset(i) < 0) continue;
    const Parameter& p = params[i];
    const ShardGroup g = shard_group_of(p, par);
    b.parameters.push_back({p.name, layout.flat_offset(i), layout.numel(i), p.value.sizes().vec(),
                            tp_boxes(full_shape_of(p, g.size), p.shard, g.rank, g.size)});
  }
  return b;
}

at::Tensor piece_of(const at::Tensor& local, const Box& box) {
  if (box.dim < 0) return local;
  return local.narrow(box.dim, box.local_begin, box.shape.at(static_cast<std::size_t>(box.dim)));
}

nlohmann::json to_json(const Entry& e) {
  return {{"key", e.key},
          {"global_shape", e.global_shape},
          {"global_offset", e.global_offset},
          {"local_shape", e.local_shape},
          {"replica_id", e.replica_id},
          {"storage", e.storage},
          {"dtype", e.dtype}};
}

Entry entry_from_json(const nlohmann::json& j) {
  Entry e;
  e.key = j.at("key").get<std::string>();
  e.global_shape = j.at("global_shape").get<std::vector<std::int64_t>>();
  e.global_offset = j.at("global_offset").get<std::vector<std::int64_t>>();
  e.local_shape = j.at("local_shape").get<std::vector<std::int64_t>>();
  e.replica_id = j.at("replica_id").get<int>();
  e.storage = j.at("storage").get<std::string>();
  e.dtype = j.at("dtype").get<std::string>();
  return e;
}

namespace {

nlohmann::json box_json(const Box& b) {
  return {{"offset", b.offset}, {"shape", b.shape}, {"dim", b.dim}, {"local_begin", b.local_begin}};
}

Box box_from_json(const nlohmann::json& j) {
  return {j.at("offset").get<std::vector<std::int64_t>>(),
          j.at("shape").get<std::vector<std::int64_t>>(), j.at("dim").get<std::int64_t>(),
          j.at("local_begin").get<std::int64_t>()};
}

}  // namespace

nlohmann::json to_json(const FlatBuffer& b) {
  nlohmann::json parameters = nlohmann::json::array();
  for (const FlatParameter& p : b.parameters) {
    nlohmann::json boxes = nlohmann::json::array();
    for (const Box& box : p.boxes) boxes.push_back(box_json(box));
    parameters.push_back({{"key", p.key},
                          {"offset", p.offset},
                          {"numel", p.numel},
                          {"local_shape", p.local_shape},
                          {"boxes", boxes}});
  }
  return {{"dp", b.dp}, {"shard", b.shard}, {"parameters", parameters}};
}

FlatBuffer flat_buffer_from_json(const std::string& id, const nlohmann::json& j) {
  FlatBuffer b;
  b.id = id;
  b.dp = j.at("dp").get<int>();
  b.shard = j.at("shard").get<std::int64_t>();
  for (const nlohmann::json& p : j.at("parameters")) {
    FlatParameter f;
    f.key = p.at("key").get<std::string>();
    f.offset = p.at("offset").get<std::int64_t>();
    f.numel = p.at("numel").get<std::int64_t>();
    f.local_shape = p.at("local_shape").get<std::vector<std::int64_t>>();
    for (const nlohmann::json& box : p.at("boxes")) f.boxes.push_back(box_from_json(box));
    b.parameters.push_back(std::move(f));
  }
  return b;
}

}  // namespace parity::checkpoint
