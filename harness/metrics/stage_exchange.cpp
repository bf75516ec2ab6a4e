#include "harness/metrics/stage_exchange.h"

#include <ATen/ATen.h>

#include <cstring>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "harness/parallel/byte_gather.h"
#include "harness/parallel/communicator.h"

namespace parity {

namespace {

nlohmann::json placement_json(const Placement& p) {
  if (std::holds_alternative<Replica>(p)) return {{"replica", true}};
  if (const auto* s = std::get_if<Shard>(&p))
    return {{"shard", s->dim ? nlohmann::json(*s->dim) : nlohmann::json(nullptr)}};
  if (const auto* o = std::get_if<Owned>(&p)) return {{"owned", o->rank}};
  const auto& f = std::get<FlatShard>(p);
  return {{"flat", {{"shape", f.logical_shape}, {"start", f.start}, {"end", f.end}}}};
}

Placement placement_from(const nlohmann::json& j) {
  if (j.contains("replica")) return Replica{};
  if (j.contains("shard")) {
    Shard s;
    if (!j["shard"].is_null()) s.dim = j["shard"].get<std::int64_t>();
    return s;
  }
  if (j.contains("owned")) return Owned{j["owned"].get<int>()};
  const nlohmann::json& f = j.at("flat");
  return make_flat_shard(f.at("shape").get<std::vector<std::int64_t>>(),
                         f.at("start").get<std::int64_t>(), f.at("end").get<std::int64_t>());
}

// A tensor's dtype, shape and place in the blob (-1: undefined).
nlohmann::json tensor_json(const at::Tensor& t, std::vector<at::Tensor>& blob,
                           std::int64_t& offset) {
  if (!t.defined()) return {{"offset", -1}};
  const at::Tensor c = t.detach().to(at::kCPU).contiguous();
  nlohmann::json j = {
      {"offset", offset}, {"dtype", static_cast<int>(c.scalar_type())}, {"shape", c.sizes().vec()}};
  const std::int64_t bytes = static_cast<std::int64_t>(c.numel() * c.element_size());
  blob.push_back(at::from_blob(c.data_ptr(), {bytes}, at::kByte).clone());
  offset += bytes;
  return j;
}

at::Tensor tensor_from(const nlohmann::json& j, const std::uint8_t* blob, std::int64_t blob_size,
                       at::Device device) {
  const std::int64_t offset = j.at("offset").get<std::int64_t>();
  if (offset < 0) return at::Tensor();
  at::Tensor t = at::empty(j.at("shape").get<std::vector<std::int64_t>>(),
                           static_cast<at::ScalarType>(j.at("dtype").get<int>()));
  const std::int64_t bytes = static_cast<std::int64_t>(t.numel() * t.element_size());
  if (offset + bytes > blob_size)
    throw std::runtime_error("prepared values: a tensor past the end");
  if (bytes > 0) std::memcpy(t.data_ptr(), blob + offset, static_cast<std::size_t>(bytes));
  return t.to(device);
}

}  // namespace

at::Tensor encode_prepared(const std::vector<PreparedEntry>& entries) {
  std::vector<at::Tensor> blob;
  std::int64_t offset = 0;
  nlohmann::json all = nlohmann::json::array();
  for (const PreparedEntry& e : entries) {
    nlohmann::json values = nlohmann::json::array();
    for (const Prepared& p : e.microbatches) {
      nlohmann::json placements = nlohmann::json::array();
      for (const Placement& a : p.placements.axes) placements.push_back(placement_json(a));
      values.push_back(
          {{"value", tensor_json(p.value, blob, offset)},
           {"site", {p.site.owner, p.site.name, static_cast<int>(p.site.kind)}},
           {"placements", placements},
           {"placeholder", p.placeholder},
           {"shape", p.shape},
           {"batch_dim", p.batch_dim ? nlohmann::json(*p.batch_dim) : nlohmann::json()},
           {"reduced_size", p.reduced_size},
           {"layer", p.layer}});
    }
    all.push_back({{"metric", e.metric},
                   {"site", {e.site.owner, e.site.name, static_cast<int>(e.site.kind)}},
                   {"values", values}});
  }
  const std::string text = all.dump();
  at::Tensor header = at::empty({8 + static_cast<std::int64_t>(text.size())}, at::kByte);
  const std::int64_t length = static_cast<std::int64_t>(text.size());
  std::memcpy(header.data_ptr(), &length, 8);
  std::memcpy(header.data_ptr<std::uint8_t>() + 8, text.data(), text.size());
  blob.insert(blob.begin(), header);
  return at::cat(blob);
}

std::vector<PreparedEntry> decode_prepared(const at::Tensor& bytes, at::Device device) {
  const at::Tensor b = bytes.to(at::kCPU).contiguous();
  const std::uint8_t* data = b.data_ptr<std::uint8_t>();
  const std::int64_t size = b.numel();
  std::int64_t length = 0;
  if (size < 8) throw std::runtime_error("prepared values: no header");
  std::memcpy(&length, data, 8);
  if (length < 0 || 8 + length > size) throw std::runtime_error("prepared values: a bad header");
  const nlohmann::json all = nlohmann::json::parse(
      std::string(reinterpret_cast<const char*>(data) + 8, static_cast<std::size_t>(length)));
  const std::uint8_t* blob = data + 8 + length;
  const std::int64_t blob_size = size - 8 - length;
  auto site_from = [](const nlohmann::json& s) {
    return MetricSite{s.at(0).get<std::string>(), s.at(1).get<std::string>(),
                      static_cast<SourceKind>(s.at(2).get<int>())};
  };
  std::vector<PreparedEntry> out;
  for (const nlohmann::json& e : all) {
    PreparedEntry entry;
    entry.metric = e.at("metric").get<std::size_t>();
    entry.site = site_from(e.at("site"));
    for (const nlohmann::json& v : e.at("values")) {
      Prepared p;
      p.value = tensor_from(v.at("value"), blob, blob_size, device);
      p.site = site_from(v.at("site"));
      for (std::size_t a = 0; a < p.placements.axes.size(); ++a)
        p.placements.axes[a] = placement_from(v.at("placements").at(a));
      p.placeholder = v.at("placeholder").get<bool>();
      p.shape = v.at("shape").get<std::vector<std::int64_t>>();
      if (!v.at("batch_dim").is_null()) p.batch_dim = v.at("batch_dim").get<std::int64_t>();
      p.reduced_size = v.at("reduced_size").get<double>();
      p.layer = v.at("layer").get<std::string>();
      entry.microbatches.push_back(std::move(p));
    }
    out.push_back(std::move(entry));
  }
  return out;
}

std::vector<PreparedEntry> gather_across_stages(Communicator& pp,
                                                const std::vector<PreparedEntry>& mine,
                                                at::Device device) {
  const std::vector<at::Tensor> all = all_gather_bytes(pp, encode_prepared(mine));
  std::vector<PreparedEntry> out;
  for (int stage = 0; stage < pp.size(); ++stage) {
    if (stage == pp.rank()) {
      out.insert(out.end(), mine.begin(), mine.end());
      continue;
    }
    for (PreparedEntry& e : decode_prepared(all[static_cast<std::size_t>(stage)], device))
      out.push_back(std::move(e));
  }
  return out;
}

}  // namespace parity
