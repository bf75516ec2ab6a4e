#pragma once
// What parity check reads back from one launched run: per rank, the per-step
// results of the rank program "model" (loss, digests, gradient norms, metric
// results), the observation trace and the collective call hashes per group.
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/config/run_config.h"

namespace parity {

struct LaunchResult;

namespace checks {

struct Observation {
  int rank = 0;
  std::int64_t step = -1;
  std::int64_t microbatch = -1;
  std::string phase;  // eager, record, warmup, capture, replay
  std::string site;
  std::string kind;
  std::string digest;
  bool grad_mode = false;            // at::GradMode at the notification
  bool requires_grad = false;        // the observed tensor's flag
  bool aliases_accumulator = false;  // shares storage with the accumulator observed just before
  // The trace summary (fp64 accumulation): what backend_parity compares across
  // backends, where digests cannot match. NaN when the record has none (a device
  // tensor inside a stream capture holds nothing yet).
  std::int64_t numel = -1;
  double sum = std::numeric_limits<double>::quiet_NaN();
  double sum_sq = std::numeric_limits<double>::quiet_NaN();
};

using MetricKey = std::pair<std::string, std::string>;  // (metric, label)

struct StepData {
  std::int64_t step = 0;  // the training step (a resumed run's first is its checkpoint's)
  double loss = 0;
  double eval_loss = std::numeric_limits<double>::quiet_NaN();  // NaN: no evaluation
  std::string logits_digest;
  std::map<std::string, std::string> grads;  // parameter -> digest
  std::map<std::string, double> grad_norms;  // parameter -> fp64 L2
  // "decoder.layers.<i>/microbatch-<m>" -> fp64 L2 of the gradient at the
  // layer's input (StepResult::input_grad_norms).
  std::map<std::string, double> input_grad_norms;
  // Parameter -> digest of its value after the update, for the parameters two
  // pipeline stages hold ("shared_values": the word embeddings' copies).
  std::map<std::string, std::string> shared_values;
  std::map<MetricKey, double> metrics;  // NaN where the result was NaN (JSON null)
};

struct GroupCalls {
  std::vector<int> ranks;
  std::int64_t calls = 0;
  std::string hash;
};

// One rank's point-to-point traffic with one peer (global rank): counts and
// the FNV-1a chains of the messages' pair fingerprints, as the model program
// reports them ("point_to_point").
struct PeerMessages {
  int peer = 0;
  std::int64_t sends = 0, recvs = 0;
  std::string send_hash, recv_hash;
};

struct RankRun {
  int rank = 0;
  int stage = 0;  // the pipeline stage (coordinates.pp; 0 without PP)
  std::vector<PeerMessages> point_to_point;
  // Parameter -> its TP split: "shard" or "replica" (absent in older results).
  std::map<std::string, std::string> parameter_tp;
  std::vector<StepData> steps;
  // Parameter -> (L2 norm of this rank's piece, its projection on a fixed
  // random tensor) after training (the model program's "final_parameters").
  std::map<std::string, std::pair<double, double>> final_parameters;
  std::vector<Observation> trace;
  std::map<std::string, GroupCalls> collectives;  // axis name -> this rank's group
};

struct CheckRun {
  std::string name;   // "a", "b", "c", "a2"
  std::string title;  // "(a) scenario as given"
  RunConfig config;
  std::vector<RankRun> ranks;  // by global rank
  // The rank results without timing fields (seconds, cpu_seconds): what
  // determinism compares byte for byte.
  nlohmann::json results;
  // A resumed run (RunChange::resumed): the launch that trained its first
  // steps and saved the checkpoint it resumed from.
  std::shared_ptr<const CheckRun> saved_by;
};

// Throws std::runtime_error when a result is missing or malformed.
CheckRun check_run_from(std::string name, std::string title, const RunConfig& config,
                        const std::vector<nlohmann::json>& results);
RankRun rank_run_from(const nlohmann::json& result);

}  // namespace checks
}  // namespace parity
