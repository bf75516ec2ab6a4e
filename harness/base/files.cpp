#include "harness/base/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace parity::files {
namespace {

std::string system_error(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

bool write_all(int fd, std::string_view content) {
  const char* p = content.data();
  std::size_t left = content.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

bool try_write_atomically(const std::string& path, std::string_view content, std::string* error) {
  // mkstemp beside the target: same file system, so rename is atomic; a unique
  // name, so concurrent writers (threads or processes) never share a temp file.
  std::string templ = path + ".tmp.XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  const int fd = ::mkstemp(buf.data());
  if (fd < 0) {
    if (error) *error = system_error("cannot create a temporary file for", path);
    return false;
  }
  const std::string tmp = buf.data();
  ::fchmod(fd, 0644);
  const bool written = write_all(fd, content) && ::fsync(fd) == 0;
  const int saved = errno;
  if (::close(fd) != 0 || !written) {
    errno = written ? errno : saved;
    if (error) *error = system_error("cannot write", tmp);
    ::unlink(tmp.c_str());
    return false;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    if (error) *error = system_error("cannot rename " + tmp + " to", path);
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

void write_atomically(const std::string& path, std::string_view content) {
  std::string error;
  if (!try_write_atomically(path, content, &error)) throw std::runtime_error(error);
}

std::string why_not_writable(const std::string& path) {
  if (path.empty()) return "the path is empty";
  if (is_directory(path)) return "it is a folder, not a file";
  const std::size_t slash = path.find_last_of('/');
  const std::string folder =
      slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  struct stat st {};
  if (::stat(folder.c_str(), &st) != 0) return "its folder " + folder + " does not exist";
  if (!S_ISDIR(st.st_mode)) return folder + " is not a folder";
  std::string templ = path + ".probe.XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  const int fd = ::mkstemp(buf.data());
  if (fd < 0) return "cannot create a file in " + folder + ": " + std::strerror(errno);
  ::close(fd);
  ::unlink(buf.data());
  return "";
}

std::optional<std::string> read(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string out;
  char chunk[65536];
  for (;;) {
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      return std::nullopt;
    }
    if (n == 0) break;
    out.append(chunk, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void create_directories(const std::string& path) {
  if (path.empty()) return;
  std::string prefix;
  std::size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    prefix = path.substr(0, pos);
    if (prefix.empty()) continue;
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST)
      throw std::runtime_error(system_error("cannot create directory", prefix));
  }
  if (!is_directory(path))
    throw std::runtime_error("cannot create directory " + path + ": not a directory");
}

std::optional<std::vector<std::string>> list_directory(const std::string& path) {
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) return std::nullopt;
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

bool remove_tree(const std::string& path) noexcept {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return errno == ENOENT;
  if (!S_ISDIR(st.st_mode)) return ::unlink(path.c_str()) == 0;
  bool ok = true;
  if (DIR* dir = ::opendir(path.c_str())) {
    while (const dirent* e = ::readdir(dir)) {
      const std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      ok = remove_tree(path + "/" + name) && ok;
    }
    ::closedir(dir);
  } else {
    ok = false;
  }
  return ::rmdir(path.c_str()) == 0 && ok;
}

TempDir::TempDir(std::string_view prefix) {
  const char* base = std::getenv("TMPDIR");
  std::string templ =
      std::string(base && *base ? base : "/tmp") + "/" + std::string(prefix) + "-XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr)
    throw std::runtime_error(system_error("cannot create a temporary directory", templ));
  path_ = buf.data();
}

TempDir::~TempDir() { remove_tree(path_); }

}  // namespace parity::files
