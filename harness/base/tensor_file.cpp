#include "harness/base/tensor_file.h"

#include "harness/base/file_kind.h"
#include "harness/base/safetensors.h"

namespace parity {

NamedTensors read_tensor_file(const std::string& path) {
  std::string why;
  const std::optional<std::string> bytes = files::read_file(path, &why);
  if (!bytes) throw TensorFileError(path + ": " + why);
  if (bytes->rfind("PK\x03\x04", 0) == 0) return parse_torch_save(*bytes, path);
  const std::string kind = files::describe_content(*bytes);
  if (kind != "a safetensors file")
    throw TensorFileError(path + ": " + kind +
                          ", expected a safetensors file or a torch.save (zip) file");
  try {
    return safetensors::parse(*bytes, path).tensors;
  } catch (const safetensors::FormatError& e) {
    throw TensorFileError(std::string(e.what()) +
                          " (parity reads safetensors and torch.save zip files)");
  }
}

}  // namespace parity
