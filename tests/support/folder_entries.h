#pragma once
// The names in a folder, for tests that assert what a run left behind.
#include <dirent.h>

#include <string>
#include <vector>

namespace parity::testing {

// The names in `dir` (without . and ..); empty when it cannot be read.
inline std::vector<std::string> folder_entries(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n != "." && n != "..") out.push_back(n);
    }
    ::closedir(d);
  }
  return out;
}

}  // namespace parity::testing
