#include "harness/sweep/results.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "harness/base/files.h"

namespace parity::sweep {

ResultsFile::ResultsFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw std::runtime_error(path + ": cannot open for appending: " + std::strerror(errno));
  // A torn last line (a crash mid-write) is cut off, so the next line does not
  // join it into a line no reader can parse.
  const std::optional<std::string> text = files::read(path);
  if (text && !text->empty() && text->back() != '\n') {
    const std::size_t keep = text->rfind('\n') == std::string::npos ? 0 : text->rfind('\n') + 1;
    if (::ftruncate(fd_, static_cast<off_t>(keep)) != 0)
      throw std::runtime_error(path + ": cannot cut its torn last line: " + std::strerror(errno));
  }
}

ResultsFile::~ResultsFile() {
  if (fd_ >= 0) ::close(fd_);
}

void ResultsFile::append(const nlohmann::ordered_json& record) {
  const std::string line = record.dump() + "\n";
  std::lock_guard<std::mutex> lock(mutex_);
  // One write: with O_APPEND the line lands whole at the end. A short write
  // (disk full, a signal) leaves a torn last line, which the reader skips; the
  // rest is written after it only to report the error on the next call.
  std::size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(path_ + ": cannot append: " + std::strerror(errno));
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd_) != 0)
    throw std::runtime_error(path_ + ": cannot fsync: " + std::strerror(errno));
}

ResultsRead read_results(const std::string& path) {
  ResultsRead out;
  const std::optional<std::string> text = files::read(path);
  if (!text) return out;
  std::size_t start = 0;
  int line_number = 0;
  while (start < text->size()) {
    const std::size_t end = text->find('\n', start);
    const bool last = end == std::string::npos || end + 1 == text->size();
    const std::string line =
        text->substr(start, end == std::string::npos ? std::string::npos : end - start);
    ++line_number;
    nlohmann::ordered_json record;
    bool ok = end != std::string::npos;  // a line without its newline was cut short
    if (ok) {
      try {
        record = nlohmann::ordered_json::parse(line);
        ok = record.is_object();
      } catch (const nlohmann::json::parse_error&) {
        ok = false;
      }
    }
    if (!ok) {
      if (!last)
        throw std::runtime_error(path + ": line " + std::to_string(line_number) +
                                 " is not a JSON object (the file was edited or corrupted)");
      out.warning = path + ": skipped a torn last line (" + std::to_string(line.size()) + " bytes)";
      break;
    }
    out.records.push_back(std::move(record));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

}  // namespace parity::sweep
