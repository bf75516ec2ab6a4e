#include "harness/base/file_kind.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "harness/base/files.h"

namespace parity::files {
namespace {

bool looks_like_safetensors(std::string_view b) {
  if (b.size() < 9) return false;
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(b[i]);
  return n > 1 && n <= b.size() - 8 && b[8] == '{';
}

// Printable ASCII, white space and well-formed UTF-8 in the first 512 bytes (a
// sequence cut by the 512-byte window counts as well-formed).
bool is_text(std::string_view b) {
  const std::size_t n = std::min<std::size_t>(b.size(), 512);
  for (std::size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(b[i]);
    if (c < 0x80) {
      if (c < 0x09 || (c > 0x0d && c < 0x20) || c == 0x7f) return false;
      continue;
    }
    const int follow = (c & 0xe0) == 0xc0   ? 1
                       : (c & 0xf0) == 0xe0 ? 2
                       : (c & 0xf8) == 0xf0 ? 3
                                            : -1;
    if (follow < 0 || c == 0xc0 || c == 0xc1) return false;
    for (int k = 1; k <= follow && i + k < n; ++k)
      if ((static_cast<unsigned char>(b[i + k]) & 0xc0) != 0x80) return false;
    i += static_cast<std::size_t>(follow);
  }
  return true;
}

}  // namespace

std::string describe_content(std::string_view b) {
  if (b.empty()) return "an empty file";
  if (b.rfind("PK\x03\x04", 0) == 0) return "a zip archive (torch.save)";
  if (b.rfind("\x80\x02", 0) == 0 || b.rfind("\x80\x04", 0) == 0)
    return "a legacy (non-zip) torch.save or pickle file";
  if (looks_like_safetensors(b)) return "a safetensors file";
  if (!is_text(b)) return "binary data";
  std::size_t first = b.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return "a file of white space only";
  if (b[first] == '{') return "a JSON object";
  if (b[first] == '[') return "JSON (an array)";
  std::string head(b.substr(first, 24));
  const std::size_t eol = head.find_first_of("\r\n");
  if (eol != std::string::npos) head.resize(eol);
  return "text beginning \"" + head + "\"";
}

std::optional<std::string> read_file(const std::string& path, std::string* why) {
  if (is_directory(path)) {
    if (why) *why = "it is a folder, not a file";
    return std::nullopt;
  }
  if (!exists(path)) {
    if (why) *why = "no such file";
    return std::nullopt;
  }
  errno = 0;
  std::optional<std::string> bytes = read(path);
  if (!bytes && why) *why = std::string("cannot read: ") + std::strerror(errno ? errno : EIO);
  return bytes;
}

}  // namespace parity::files
