#include "harness/base/tensor_file.h"

#include "harness/base/file_kind.h"
#include "harness/base/safetensors.h"
#include "harness/base/torch_save.h"

namespace parity {

bool is_zip(const std::string& bytes) { return bytes.rfind("PK\x03\x04", 0) == 0; }

NamedTensors read_tensor_file(const std::string& path) {
  std::string why;
  std::optional<std::string> bytes = files::read_file(path, &why);
  if (!bytes) throw TensorFileError(path + ": " + why);
  return parse_tensor_file(std::move(*bytes), path);
}

NamedTensors parse_tensor_file(std::string bytes, const std::string& source) {
  if (is_zip(bytes)) return top_level_tensors(TorchSaveFile(std::move(bytes), source));
  const std::string kind = files::describe_content(bytes);
  if (kind != "a safetensors file")
    throw TensorFileError(source + ": " + kind +
                          ", expected a safetensors file or a torch.save (zip) file");
  try {
    return safetensors::parse(bytes, source).tensors;
  } catch (const safetensors::FormatError& e) {
    throw TensorFileError(std::string(e.what()) +
                          " (parity reads safetensors and torch.save zip files)");
  }
}

}  // namespace parity
