#pragma once
// safetensors files (https://huggingface.co/docs/safetensors): an 8-byte
// little-endian header length N, N bytes of JSON
// {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}},
// then the raw little-endian tensor bytes (offsets are relative to the byte after
// the header). Reading validates everything the format promises and reports a
// bad file as one line naming what is wrong. docs/weights.md.
#include <ATen/core/Tensor.h>

#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace parity::safetensors {

// One line: "FILE: safetensors: tensor \"w\": data_offsets [0, 12] hold 12 bytes, F32 [2, 2] needs
// 16".
class FormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Contents {
  // In the order of their data offsets (the order they were written).
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  std::map<std::string, std::string> metadata;  // "__metadata__"
  // nullptr when absent.
  const at::Tensor* find(std::string_view name) const;
};

// "F32", "BF16", "I64", ...; throws FormatError for a dtype safetensors cannot hold.
std::string dtype_name(at::ScalarType t);

// The file's bytes: the header padded with spaces to a multiple of 8 bytes,
// tensors (made contiguous, copied to the CPU) in the given order. Throws
// FormatError on a duplicate or empty name.
std::string serialize(const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});
// Parses bytes; `source` names the file in messages. Throws FormatError.
Contents parse(std::string_view bytes, const std::string& source);

// files::read + parse; FormatError "FILE: cannot read" when it cannot be read.
Contents read_file(const std::string& path);
// serialize + files::write_atomically; FormatError naming the file on failure.
void write_file(const std::string& path,
                const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                const std::map<std::string, std::string>& metadata = {});

}  // namespace parity::safetensors
