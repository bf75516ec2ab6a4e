// replica_consistency: the copies of a parameter that training must keep equal
// are equal. After finalize_grads every rank holding the same piece of a
// parameter (its TP shard, or the whole of a TP-replicated one) must hold the
// same gradient bit for bit, or the replicas step apart (the optimizer applies
// each rank's own gradient). Sequence-parallel norms and row-parallel biases
// are the classic case: each TP rank sees part of the sequence, so their
// gradients are partial sums until the TP all-reduce (gpt-neox PR 1259).
// With pp > 1 and tied embeddings or MTP depths the first and the last stage
// each hold the word embeddings: their values after every step must be equal
// too (the gradients are summed over the embedding group, and a copy that
// started or stepped apart would stay apart).
#include <map>
#include <string>
#include <tuple>
#include <utility>

#include "harness/checks/properties/common.h"
#include "harness/parallel/topology.h"

namespace parity::checks {

using namespace detail;

PropertyResult check_replica_consistency(const std::vector<const CheckRun*>& runs) {
  PropertyResult p = make("replica_consistency", run_list(runs));
  std::int64_t groups = 0, copies = 0, shared_groups = 0, shared_copies = 0;
  for (const CheckRun* run : runs) {
    const RunConfig& c = run->config;
    if (c.world_size() < 2) continue;
    const ParallelTopology topology(c.tp, c.cp, c.dp, c.ep, c.pp, c.etp);
    // (what: gradient or value, step, parameter, piece: the TP rank of a
    // shard, a routed expert's ETP rank, -1 for a replica) -> (first rank, its digest) and how many
    // copies agreed.
    using Key = std::tuple<std::string, std::size_t, std::string, int>;
    std::map<Key, std::pair<int, std::string>> first;
    std::map<Key, int> count;
    auto compare = [&](const RankRun& r, const std::string& what, std::size_t s,
                       const std::string& name, const std::string& digest, const char* rule) {
      const auto split = r.parameter_tp.find(name);
      if (split == r.parameter_tp.end()) return;  // a result without placements
      const Key key{what, s, name,
                    split->second == "shard" ? shard_piece(topology, r.rank, name) : -1};
      const auto [it, inserted] = first.try_emplace(key, r.rank, digest);
      ++count[key];
      if (!inserted && it->second.second != digest)
        fail(p,
             "(" + run->name + ") step " + std::to_string(s) + " " + what + " " + name + ": rank " +
                 std::to_string(r.rank) + " " + to_string(topology.coordinates(r.rank)) +
                 " differs from its replica on rank " + std::to_string(it->second.first) + " " +
                 to_string(topology.coordinates(it->second.first)) + " (" + rule + ")",
             name);
    };
    for (const RankRun& r : run->ranks)
      for (std::size_t s = 0; s < r.steps.size(); ++s) {
        for (const auto& [name, digest] : r.steps[s].grads)
          compare(r, "gradient", s, name, digest,
                  "after finalize_grads the replicas must be bitwise equal");
        // The word embeddings' copies on the first and the last pipeline
        // stage: the embedding group keeps their values equal.
        for (const auto& [name, digest] : r.steps[s].shared_values)
          compare(r, "value", s, name, digest,
                  "after the update the stages' copies must be bitwise equal");
      }
    for (const auto& [key, n] : count) {
      if (n < 2) continue;
      const bool value = std::get<0>(key) == "value";
      ++(value ? shared_groups : groups);
      (value ? shared_copies : copies) += n;
    }
  }
  if (groups == 0)
    return skip(p, "no parameter has two copies (one rank per run, or nothing recorded)",
                "use a run with tp, cp or dp > 1");
  if (p.status == Status::pass) {
    p.reason = std::to_string(groups) + " replicated (step, parameter, piece) groups, " +
               std::to_string(copies) + " gradient copies bitwise equal";
    if (shared_groups > 0)
      p.reason += "; " + std::to_string(shared_copies) +
                  " values of the stages' word-embedding copies bitwise equal (" +
                  std::to_string(shared_groups) + " groups)";
  }
  return p;
}

namespace {
class ReplicaConsistency final : public Property {
 public:
  std::string_view name() const override { return "replica_consistency"; }
  std::string_view doc() const override {
    return "every replica of a parameter's gradient is identical after finalize_grads, and the "
           "pipeline stages' copies of the word embeddings after every step";
  }
  std::string_view needs() const override {
    return "a parameter held by two ranks (--tp, --cp or --dp > 1)";
  }
  // Every run the others need: it compares each run's own replicas.
  std::vector<RunVariant> runs_needed(const RunConfig&) const override { return {}; }
  PropertyResult evaluate(const CheckRuns& runs, std::vector<MetricComparison>*) const override {
    return check_replica_consistency(runs.all());
  }
};
}  // namespace

PARITY_REGISTER_PROPERTY(ReplicaConsistency, 9)

}  // namespace parity::checks
