#pragma once
// What a file that failed to parse actually is, so that an error can say "a
// torch.save file, expected safetensors" instead of quoting a parser's byte
// offset or a nonsense header length from text read as binary.
#include <optional>
#include <string>
#include <string_view>

namespace parity::files {

// "a zip archive (torch.save)", "a safetensors file", "a JSON object", "JSON",
// "an empty file", "text beginning \"step  loss\"", "binary data".
std::string describe_content(std::string_view bytes);

// The whole file; nullopt with `why` set to one phrase when it cannot be read:
// "it is a folder, not a file", "no such file", "cannot read: <errno text>".
std::optional<std::string> read_file(const std::string& path, std::string* why);

}  // namespace parity::files
