#include "harness/model/loaded_batch.h"

#include <ATen/ATen.h>

#include "harness/base/tensor_file.h"

namespace parity {

LoadedBatch::LoadedBatch(const std::string& path, std::int64_t global_batch, std::int64_t seq,
                         std::int64_t micro_batch, std::int64_t vocab)
    : micro_batch_(micro_batch) {
  // safetensors or torch.save, told by the content (read_tensor_file).
  const NamedTensors file = read_tensor_file(path);
  const std::string expected = "int64 [rows, " + std::to_string(seq) +
                               "] with rows a multiple of the global batch " +
                               std::to_string(global_batch);
  auto field = [&](const char* name) {
    const at::Tensor* t = nullptr;
    for (const auto& [n, tensor] : file)
      if (n == name) t = &tensor;
    if (t == nullptr) {
      // What the file holds instead: a weights or gradients file given by mistake.
      std::string held;
      for (std::size_t i = 0; i < file.size() && i < 3; ++i)
        held += (i ? ", '" : "'") + file[i].first + "'";
      if (file.size() > 3) held += ", ...";
      throw BatchError(path + ": " + name + ": missing (expected " + expected +
                       "; the file holds " + std::to_string(file.size()) + " tensor(s)" +
                       (file.empty() ? "" : ": " + held) + ")");
    }
    if (t->scalar_type() != at::kLong)
      throw BatchError(path + ": " + name + ": dtype " + c10::toString(t->scalar_type()) +
                       ", expected " + expected);
    if (t->dim() != 2 || t->size(1) != seq || t->size(0) == 0 || t->size(0) % global_batch != 0) {
      std::string shape = "[";
      for (std::int64_t d = 0; d < t->dim(); ++d)
        shape += (d ? ", " : "") + std::to_string(t->size(d));
      throw BatchError(path + ": " + name + ": shape " + shape + "], expected " + expected);
    }
    if (t->numel() > 0) {
      const std::int64_t lo = t->min().item<std::int64_t>(), hi = t->max().item<std::int64_t>();
      if (lo < 0 || hi >= vocab)
        throw BatchError(path + ": " + name + ": values in [" + std::to_string(lo) + ", " +
                         std::to_string(hi) + "], the vocabulary is [0, " + std::to_string(vocab) +
                         ")");
    }
    return *t;
  };
  tokens_ = field("tokens");
  labels_ = field("labels");
  if (tokens_.size(0) != labels_.size(0))
    throw BatchError(path + ": labels: " + std::to_string(labels_.size(0)) + " rows, tokens has " +
                     std::to_string(tokens_.size(0)));
  for (const auto& [name, t] : file)
    if (name != "tokens" && name != "labels")
      throw BatchError(path + ": " + name +
                       ": unknown tensor (a batch file holds tokens and labels)");
}

MicrobatchData LoadedBatch::microbatch(std::int64_t index) const {
  const std::int64_t blocks = rows() / micro_batch_;
  const std::int64_t first = (index % blocks) * micro_batch_;
  return {tokens_.slice(0, first, first + micro_batch_).t().contiguous(),
          labels_.slice(0, first, first + micro_batch_).t().contiguous()};
}

}  // namespace parity
