#include "harness/base/safetensors.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "harness/base/files.h"
#include "harness/base/shape_text.h"

// The format is little-endian; parity copies bytes as they are.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors I/O assumes a little-endian host");

namespace parity::safetensors {
namespace {

// The header limit of the reference implementation (100 MB).
constexpr std::uint64_t kMaxHeader = 100'000'000;

struct DTypeEntry {
  const char* name;
  at::ScalarType type;
};
constexpr DTypeEntry kDTypes[] = {
    {"F64", at::kDouble}, {"F32", at::kFloat}, {"F16", at::kHalf},  {"BF16", at::kBFloat16},
    {"I64", at::kLong},   {"I32", at::kInt},   {"I16", at::kShort}, {"I8", at::kChar},
    {"U8", at::kByte},    {"BOOL", at::kBool},
};

[[noreturn]] void fail(const std::string& source, const std::string& what) {
  throw FormatError(source + ": safetensors: " + what);
}

std::uint64_t read_u64_le(const char* p) {
  std::uint64_t v = 0;
  std::memcpy(&v, p, sizeof v);
  return v;
}

struct Entry {
  std::string name;
  at::ScalarType type;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;
};

Entry parse_entry(const std::string& source, const std::string& name, const nlohmann::json& e,
                  std::uint64_t data_size) {
  const std::string where = "tensor \"" + name + "\"";
  if (!e.is_object()) fail(source, where + ": expected an object, got " + e.dump());
  for (const auto& [key, value] : e.items()) {
    (void)value;
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      fail(source, where + ": unknown field \"" + key + "\"");
  }
  if (!e.contains("dtype") || !e["dtype"].is_string())
    fail(source, where + ": no string \"dtype\"");
  const std::string dtype = e["dtype"].get<std::string>();
  Entry out;
  out.name = name;
  bool known = false;
  for (const DTypeEntry& d : kDTypes)
    if (dtype == d.name) out.type = d.type, known = true;
  if (!known)
    fail(source, where + ": dtype \"" + dtype +
                     "\" is not supported (F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL)");
  if (!e.contains("shape") || !e["shape"].is_array()) fail(source, where + ": no \"shape\" array");
  // numel * itemsize must not overflow: every partial product stays below 2^62.
  std::uint64_t numel = 1;
  for (const nlohmann::json& d : e["shape"]) {
    if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<std::int64_t>() >= 0))
      fail(source, where + ": shape " + e["shape"].dump() +
                       " has an entry that is not a non-negative integer");
    const std::uint64_t v = d.get<std::uint64_t>();
    if (v > (std::uint64_t(1) << 62) || (v != 0 && numel > (std::uint64_t(1) << 62) / v))
      fail(source, where + ": shape " + e["shape"].dump() + " is too large");
    numel *= v;
    out.shape.push_back(static_cast<std::int64_t>(v));
  }
  const nlohmann::json* offsets = e.contains("data_offsets") ? &e["data_offsets"] : nullptr;
  if (offsets == nullptr || !offsets->is_array() || offsets->size() != 2 ||
      !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned())
    fail(source, where + ": \"data_offsets\" must be two non-negative integers [begin, end]");
  out.begin = (*offsets)[0].get<std::uint64_t>();
  out.end = (*offsets)[1].get<std::uint64_t>();
  if (out.begin > out.end)
    fail(source, where + ": data_offsets " + offsets->dump() + ": begin is after end");
  if (out.end > data_size)
    fail(source, where + ": data_offsets " + offsets->dump() + " end past the data (" +
                     std::to_string(data_size) + " bytes)");
  const std::uint64_t need = numel * at::elementSize(out.type);
  if (out.end - out.begin != need)
    fail(source, where + ": data_offsets " + offsets->dump() + " hold " +
                     std::to_string(out.end - out.begin) + " bytes, " + dtype + " " +
                     shape_text(out.shape) + " needs " + std::to_string(need));
  return out;
}

}  // namespace

const at::Tensor* Contents::find(std::string_view name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}

std::string dtype_name(at::ScalarType t) {
  for (const DTypeEntry& d : kDTypes)
    if (d.type == t) return d.name;
  throw FormatError(std::string("safetensors: dtype ") + c10::toString(t) + " cannot be stored");
}

std::string serialize(const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<at::Tensor> data;
  std::uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    if (name.empty() || name == "__metadata__")
      throw FormatError("safetensors: a tensor cannot be named \"" + name + "\"");
    if (header.contains(name))
      throw FormatError("safetensors: tensor \"" + name + "\" given twice");
    at::Tensor t = tensor.detach().to(at::kCPU).contiguous();
    const std::uint64_t bytes = static_cast<std::uint64_t>(t.numel()) * t.element_size();
    header[name] = {{"dtype", dtype_name(t.scalar_type())},
                    {"shape", t.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(std::move(t));
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the reference writer aligns the data to 8 bytes
  std::string out(8, '\0');
  const std::uint64_t n = text.size();
  std::memcpy(out.data(), &n, sizeof n);
  out += text;
  out.reserve(out.size() + offset);
  for (const at::Tensor& t : data)
    out.append(static_cast<const char*>(t.data_ptr()), t.numel() * t.element_size());
  return out;
}

Contents parse(std::string_view bytes, const std::string& source) {
  if (bytes.size() < 8)
    fail(source, "the file has " + std::to_string(bytes.size()) +
                     " bytes, fewer than the 8-byte header length");
  const std::uint64_t n = read_u64_le(bytes.data());
  if (n > kMaxHeader)
    fail(source, "header length " + std::to_string(n) + " is over the 100 MB limit");
  if (n > bytes.size() - 8)
    fail(source, "header length " + std::to_string(n) + " is past the end of the file (" +
                     std::to_string(bytes.size()) + " bytes)");
  const std::string_view text = bytes.substr(8, n);
  if (text.empty() || text.front() != '{') fail(source, "the header does not start with '{'");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(source, std::string("the header is not JSON: ") + e.what());
  }
  if (!header.is_object()) fail(source, "the header is not a JSON object");
  const std::uint64_t data_size = bytes.size() - 8 - n;
  const char* data = bytes.data() + 8 + n;

  Contents out;
  std::vector<Entry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) fail(source, "\"__metadata__\" is not an object of strings");
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string()) fail(source, "\"__metadata__\".\"" + k + "\" is not a string");
        out.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(source, name, value, data_size));
  }
  // The tensors tile the data exactly: no overlap, no byte that belongs to none.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t covered = 0;
  const Entry* previous = nullptr;
  for (const Entry& e : entries) {
    if (e.begin < covered)
      fail(source, "tensors \"" + previous->name + "\" [" + std::to_string(previous->begin) + ", " +
                       std::to_string(previous->end) + "] and \"" + e.name + "\" [" +
                       std::to_string(e.begin) + ", " + std::to_string(e.end) + "] overlap");
    if (e.begin > covered)
      fail(source, "data bytes [" + std::to_string(covered) + ", " + std::to_string(e.begin) +
                       ") belong to no tensor");
    covered = e.end;
    previous = &e;
  }
  if (covered != data_size)
    fail(source, "data bytes [" + std::to_string(covered) + ", " + std::to_string(data_size) +
                     ") belong to no tensor");
  for (const Entry& e : entries) {
    at::Tensor t = at::empty(e.shape, at::TensorOptions().dtype(e.type));
    if (e.end > e.begin) std::memcpy(t.data_ptr(), data + e.begin, e.end - e.begin);
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

Contents read_file(const std::string& path) {
  const std::optional<std::string> bytes = files::read(path);
  if (!bytes) throw FormatError(path + (files::exists(path) ? ": cannot read" : ": no such file"));
  return parse(*bytes, path);
}

void write_file(const std::string& path,
                const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                const std::map<std::string, std::string>& metadata) {
  std::string error;
  if (!files::try_write_atomically(path, serialize(tensors, metadata), &error))
    throw FormatError(path + ": cannot write: " + error);
}

}  // namespace parity::safetensors
