#pragma once
// What a processes-mode parent and its workers share in the run's private
// directory: spec.json (the LaunchSpec), arguments.json (the program's),
// `status` (one RankStatusRecord per rank, MAP_SHARED), `store` (the
// FileStore) and result.R.json (each worker's end). Internal to harness/runtime.
#include <string>

#include "harness/parallel/rank_status.h"

namespace parity {

inline std::string spec_path(const std::string& dir) { return dir + "/spec.json"; }
inline std::string arguments_path(const std::string& dir) { return dir + "/arguments.json"; }
inline std::string status_path(const std::string& dir) { return dir + "/status"; }
inline std::string store_path(const std::string& dir) { return dir + "/store"; }
inline std::string result_path(const std::string& dir, int rank) {
  return dir + "/result." + std::to_string(rank) + ".json";
}

// The exit code of a worker whose result file could not be written.
constexpr int kWorkerResultUnwritten = 4;

// The shared status file, mapped.
class StatusMapping {
 public:
  // create: a new file sized for `world` records (the parent); otherwise an
  // existing one at least that large (a worker). Throws std::runtime_error.
  StatusMapping(const std::string& path, int world, bool create);
  ~StatusMapping();
  StatusMapping(const StatusMapping&) = delete;
  StatusMapping& operator=(const StatusMapping&) = delete;
  RankStatusRecord* record(int rank) { return records_ + rank; }

 private:
  std::size_t size_;
  RankStatusRecord* records_ = nullptr;
};

}  // namespace parity
