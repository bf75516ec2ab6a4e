#include "harness/base/tensor_file.h"

#include "harness/base/files.h"
#include "harness/base/safetensors.h"

namespace parity {

NamedTensors read_tensor_file(const std::string& path) {
  const std::optional<std::string> bytes = files::read(path);
  if (!bytes)
    throw TensorFileError(path + (files::exists(path) ? ": cannot read" : ": no such file"));
  if (bytes->rfind("PK\x03\x04", 0) == 0) return parse_torch_save(*bytes, path);
  try {
    return safetensors::parse(*bytes, path).tensors;
  } catch (const safetensors::FormatError& e) {
    throw TensorFileError(std::string(e.what()) +
                          " (parity reads safetensors and torch.save zip files)");
  }
}

}  // namespace parity
