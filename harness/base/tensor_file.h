#pragma once
// Files of named tensors: safetensors (harness/base/safetensors.h) or a
// `torch.save`d dict of tensors in PyTorch's zip format (a state dict, also
// model.state_dict()'s OrderedDict; harness/base/torch_save.h). The format is
// told by the first bytes ("PK\x03\x04" is a zip). docs/weights.md.
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
// not a tensor (None, bytes: `_extra_state`) are left out. Throws TensorFileError,
// whose line names the format it found ("F: a torch.save (zip) file holding a
// list, expected a dict of name -> tensor").
NamedTensors read_tensor_file(const std::string& path);
// The same for a file already read; `source` names it in messages.
NamedTensors parse_tensor_file(std::string bytes, const std::string& source);

// A zip archive (PyTorch's torch.save format) by its first bytes.
bool is_zip(const std::string& bytes);

}  // namespace parity
