// The one translation unit with LibTorch's unpickler (torch/csrc/jit): a
// torch.save zip holding a dict (a state dict, an OrderedDict) of name -> tensor.
#include <torch/csrc/jit/serialization/pickle.h>

#include <vector>

#include "harness/base/tensor_file.h"

namespace parity {

NamedTensors parse_torch_save(const std::string& bytes, const std::string& source) {
  c10::IValue value;
  try {
    value = torch::jit::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
  } catch (const std::exception& e) {
    std::string what = e.what();
    what = what.substr(0, what.find('\n'));
    throw TensorFileError(source + ": torch.save: cannot unpickle: " + what +
                          " (save a dict of tensors, or use safetensors)");
  }
  if (!value.isGenericDict())
    throw TensorFileError(source + ": torch.save: expected a dict of tensors, got " +
                          value.tagKind());
  NamedTensors out;
  for (const auto& entry : value.toGenericDict()) {
    if (!entry.key().isString())
      throw TensorFileError(source + ": torch.save: a key is a " + entry.key().tagKind() +
                            ", not a string");
    const std::string name = entry.key().toStringRef();
    // _extra_state and the like: not a tensor, not a parameter.
    if (!entry.value().isTensor()) continue;
    out.emplace_back(name, entry.value().toTensor().detach().to(at::kCPU).contiguous());
  }
  return out;
}

}  // namespace parity
