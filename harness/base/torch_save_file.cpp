// The one translation unit with LibTorch's zip reader (caffe2/serialize).
#include <ATen/ATen.h>
#include <caffe2/serialize/in_memory_adapter.h>
#include <caffe2/serialize/inline_container.h>

#include <map>
#include <optional>

#include "harness/base/torch_save.h"

namespace parity {
namespace {

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

std::optional<at::ScalarType> storage_dtype(const std::string& type) {
  static const std::map<std::string, at::ScalarType> types = {
      {"FloatStorage", at::kFloat},
      {"DoubleStorage", at::kDouble},
      {"HalfStorage", at::kHalf},
      {"BFloat16Storage", at::kBFloat16},
      {"LongStorage", at::kLong},
      {"IntStorage", at::kInt},
      {"ShortStorage", at::kShort},
      {"CharStorage", at::kChar},
      {"ByteStorage", at::kByte},
      {"BoolStorage", at::kBool},
      {"ComplexFloatStorage", at::kComplexFloat},
      {"ComplexDoubleStorage", at::kComplexDouble},
  };
  const auto it = types.find(type);
  if (it == types.end()) return std::nullopt;
  return it->second;
}

std::string shape_of(const std::vector<std::int64_t>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

}  // namespace

struct TorchSaveFile::Impl {
  std::string bytes, source;
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> zip;
  std::unique_ptr<pickle::Pickle> pickle;
  mutable std::map<std::string, at::Tensor> storages;  // by key: several views share one

  [[noreturn]] void fail(const std::string& what) const {
    throw TensorFileError(source + ": a torch.save (zip) file " + what);
  }
};

TorchSaveFile::TorchSaveFile(std::string bytes, std::string source)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.bytes = std::move(bytes);
  m.source = std::move(source);
  std::string pkl;
  try {
    m.zip = std::make_unique<caffe2::serialize::PyTorchStreamReader>(
        std::make_shared<caffe2::serialize::MemoryReadAdapter>(m.bytes.data(),
                                                               static_cast<off_t>(m.bytes.size())));
    if (!m.zip->hasRecord("data.pkl")) {
      if (m.zip->hasRecord("constants.pkl"))
        m.fail("that is a TorchScript archive (torch.jit.save), not torch.save of a dict");
      m.fail("without data.pkl: not written by torch.save");
    }
    if (m.zip->hasRecord("byteorder")) {
      const auto [data, size] = m.zip->getRecord("byteorder");
      const std::string order(static_cast<const char*>(data.get()), size);
      if (order != "little") m.fail("of byte order '" + order + "': parity reads little-endian");
    }
    const auto [data, size] = m.zip->getRecord("data.pkl");
    pkl.assign(static_cast<const char*>(data.get()), size);
  } catch (const c10::Error& e) {
    m.fail("that cannot be read as a zip archive: " + first_line(e.what_without_backtrace()));
  }
  try {
    m.pickle = std::make_unique<pickle::Pickle>(pkl);
  } catch (const pickle::PickleError& e) {
    m.fail(std::string("whose data.pkl cannot be read: ") + e.what());
  }
}

TorchSaveFile::~TorchSaveFile() = default;

const pickle::Value& TorchSaveFile::root() const { return impl_->pickle->root(); }
const std::string& TorchSaveFile::source() const { return impl_->source; }

at::Tensor TorchSaveFile::tensor(const pickle::Value& value, const std::string& name) const {
  const Impl& m = *impl_;
  if (value.kind != pickle::Value::Kind::tensor) m.fail("whose " + name + " is not a tensor");
  const pickle::TensorRef& t = value.tensor;
  const std::optional<at::ScalarType> dtype = storage_dtype(t.storage.type);
  if (!dtype) m.fail("whose " + name + " has storage type " + t.storage.type + ", not read");
  at::Tensor& storage = m.storages[t.storage.key];
  if (!storage.defined()) {
    const std::string record = "data/" + t.storage.key;
    try {
      if (!m.zip->hasRecord(record)) m.fail("without the record " + record + " that holds " + name);
      const auto [data, size] = m.zip->getRecord(record);
      const std::size_t element = c10::elementSize(*dtype);
      if (static_cast<std::uint64_t>(t.storage.numel) > size / element)
        m.fail("whose record " + record + " holds " + std::to_string(size) + " bytes, " + name +
               "'s storage needs " + std::to_string(t.storage.numel) + " x " +
               std::to_string(element));
      const std::size_t bytes = static_cast<std::size_t>(t.storage.numel) * element;
      storage = at::empty({t.storage.numel}, at::TensorOptions(*dtype));
      std::memcpy(storage.data_ptr(), data.get(), bytes);
    } catch (const c10::Error& e) {
      m.fail("whose record " + record +
             " cannot be read: " + first_line(e.what_without_backtrace()));
    }
  }
  // The view must lie inside its storage (as_strided would check too, in a
  // message that names no key).
  bool inside = t.offset >= 0 && t.offset <= t.storage.numel;
  bool empty = false;
  std::int64_t last = t.offset;
  for (std::size_t d = 0; d < t.sizes.size() && inside; ++d) {
    if (t.sizes[d] < 0 || t.strides[d] < 0) inside = false;
    if (t.sizes[d] == 0) empty = true;
  }
  for (std::size_t d = 0; d < t.sizes.size() && inside && !empty; ++d) {
    const std::int64_t span = t.sizes[d] - 1;
    if (span > 0 && t.strides[d] > (t.storage.numel - last) / span) inside = false;
    if (inside) last += span * t.strides[d];
  }
  if (!inside || (!empty && last >= t.storage.numel))
    m.fail("whose " + name + " (size " + shape_of(t.sizes) + ", stride " + shape_of(t.strides) +
           ", offset " + std::to_string(t.offset) + ") lies outside its storage of " +
           std::to_string(t.storage.numel) + " elements");
  return storage.as_strided(t.sizes, t.strides, t.offset).clone(at::MemoryFormat::Contiguous);
}

NamedTensors TorchSaveFile::tensors_of(const pickle::Value& dict) const {
  NamedTensors out;
  for (const auto& [key, value] : dict.entries) {
    if (value->kind != pickle::Value::Kind::tensor) continue;
    if (key->kind != pickle::Value::Kind::string)
      impl_->fail("with a tensor under a key that is " + key->kind_name() + ", not a name");
    out.emplace_back(key->text, tensor(*value, key->text));
  }
  return out;
}

std::string describe_torch_save_root(const pickle::Value& root) {
  if (root.kind != pickle::Value::Kind::dict) return "holding " + root.kind_name();
  std::size_t tensors = 0;
  std::string keys;
  int shown = 0;
  for (const auto& [key, value] : root.entries) {
    tensors += value->kind == pickle::Value::Kind::tensor;
    if (key->kind == pickle::Value::Kind::string && shown < 6)
      keys += std::string(shown++ ? ", " : "") + "'" + key->text + "'";
  }
  if (tensors > 0)
    return "holding a dict of " + std::to_string(tensors) + " tensor(s) and " +
           std::to_string(root.entries.size() - tensors) + " other entries";
  std::string s =
      "holding a dict of no tensors (keys " + keys + (root.entries.size() > 6 ? ", ..." : "") + ")";
  const pickle::Value* model = root.get("model");
  if (model == nullptr) model = root.get("model0");
  if (model != nullptr && model->kind == pickle::Value::Kind::dict)
    s += ": a Megatron-LM checkpoint, its tensors under \"model\"";
  return s;
}

NamedTensors top_level_tensors(const TorchSaveFile& file) {
  const std::string& source = file.source();
  const pickle::Value& root = file.root();
  if (root.kind != pickle::Value::Kind::dict)
    throw TensorFileError(source + ": a torch.save (zip) file " + describe_torch_save_root(root) +
                          ", expected a dict of name -> tensor");
  NamedTensors out = file.tensors_of(root);
  if (out.empty() && !root.entries.empty())
    throw TensorFileError(source + ": a torch.save (zip) file " + describe_torch_save_root(root) +
                          ", expected a dict of name -> tensor");
  return out;
}

}  // namespace parity
