#pragma once
// Files without <filesystem>: pip torch's libtorch.so exports statically linked
// std::filesystem symbols (pytorch/pytorch #133437), so a std::filesystem call in
// a program linked against it can resolve into libtorch.so and crash. PyTorch
// itself dropped <filesystem> on Linux for this reason (PR #134494). Everything
// parity does with files goes through these POSIX-based helpers instead.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace parity::files {

// Writes `content` to a temporary file beside `path`, fsyncs it, then renames it
// over `path`: a reader sees the old file or the whole new one, never a torn one.
// Throws std::runtime_error naming the path and the system error.
void write_atomically(const std::string& path, std::string_view content);
// As above, without throwing: false (and `error`, when given, the reason) on failure.
bool try_write_atomically(const std::string& path, std::string_view content,
                          std::string* error = nullptr);

// The whole file, or nullopt when it cannot be opened or read.
std::optional<std::string> read(const std::string& path);

// Checked before any work that ends by writing `path` (write_atomically's way:
// a temporary file beside it, then rename): "" when it can be written, else why
// not, e.g. "its folder /x does not exist", "it is a folder, not a file", "cannot create a
// file in /ro: Read-only file system". Probes by creating and removing a file.
std::string why_not_writable(const std::string& path);

bool exists(const std::string& path);
bool is_directory(const std::string& path);
// The names in a folder (without "." and ".."), sorted; nullopt when it cannot
// be opened.
std::optional<std::vector<std::string>> list_directory(const std::string& path);
// mkdir -p; throws std::runtime_error naming the path on failure.
void create_directories(const std::string& path);
// rm -rf without following symbolic links; a missing path is not an error.
// Returns false when something could not be removed.
bool remove_tree(const std::string& path) noexcept;

// A fresh private directory under $TMPDIR (or /tmp), removed with its contents
// when the object is destroyed.
class TempDir {
 public:
  explicit TempDir(std::string_view prefix = "parity");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace parity::files
