#pragma once
// Files of named tensors: safetensors (harness/base/safetensors.h) or a
// `torch.save`d dict of tensors in PyTorch's zip format (a state dict). The
// format is told by the first bytes ("PK\x03\x04" is a zip). docs/weights.md.
#include <ATen/core/Tensor.h>

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace parity {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// One line naming the file and what is wrong with it.
class TensorFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Every tensor of the file, in file order, on the CPU. Entries whose value is
// not a tensor (None, bytes: `_extra_state`) are left out. Throws TensorFileError.
NamedTensors read_tensor_file(const std::string& path);

// The torch.save reader alone (torch_save_file.cpp: the one file that includes
// LibTorch's unpickler). `bytes` is the zip archive.
NamedTensors parse_torch_save(const std::string& bytes, const std::string& source);

}  // namespace parity
