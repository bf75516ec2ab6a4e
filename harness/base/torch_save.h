#pragma once
// A torch.save file in PyTorch's zip format: the archive read with LibTorch's
// PyTorchStreamReader (the same API in LibTorch 1.13 and 2.x), its data.pkl with
// parity's restricted pickle reader (harness/base/pickle_reader.h), so that any
// object torch.save writes can be walked without running Python: a state dict
// (an OrderedDict with attributes), a Megatron-LM checkpoint whose "args" is an
// argparse.Namespace and whose "rng_state" holds numpy arrays. docs/weights.md.
#include <ATen/core/Tensor.h>

#include <memory>
#include <string>

#include "harness/base/pickle_reader.h"
#include "harness/base/tensor_file.h"

namespace parity {

class TorchSaveFile {
 public:
  // `bytes` is the zip archive (starts with "PK\x03\x04"); `source` names it in
  // messages. Throws TensorFileError: "SOURCE: a torch.save (zip) file ...".
  TorchSaveFile(std::string bytes, std::string source);
  ~TorchSaveFile();
  TorchSaveFile(const TorchSaveFile&) = delete;
  TorchSaveFile& operator=(const TorchSaveFile&) = delete;

  const pickle::Value& root() const;
  const std::string& source() const;

  // The tensor a Value of kind tensor describes: its storage record viewed with
  // the pickle's offset, sizes and strides, as a contiguous CPU tensor of the
  // storage's dtype. `name` names it in messages. Throws TensorFileError (a
  // missing or short record, a view outside its storage, an unknown dtype).
  at::Tensor tensor(const pickle::Value& value, const std::string& name) const;

  // Every entry of `dict` with a string key and a tensor value, in file order;
  // other entries (None, `_extra_state` objects, nested dicts) are skipped.
  NamedTensors tensors_of(const pickle::Value& dict) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The tensors of a torch.save'd dict of name -> tensor (a state dict):
// tensors_of(root). Throws TensorFileError naming what the file holds instead
// ("F: a torch.save (zip) file holding a list, expected a dict of name ->
// tensor"; a dict without tensors, e.g. a Megatron-LM checkpoint).
NamedTensors top_level_tensors(const TorchSaveFile& file);

// What the root holds, for messages: "a dict of 24 tensors", "a dict with keys
// 'args', 'iteration', 'model', ... (a Megatron-LM checkpoint: the tensors are
// under \"model\")", "a list".
std::string describe_torch_save_root(const pickle::Value& root);

}  // namespace parity
