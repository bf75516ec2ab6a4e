// collective_symmetry: all ranks of a group issue identical collective sequences.
#include <map>

#include "harness/checks/properties/common.h"

namespace parity::checks {

using namespace detail;

PropertyResult collective_symmetry_mismatch_failure(const std::string& run,
                                                    const std::string& mismatch) {
  PropertyResult p = make("collective_symmetry", "(" + run + ")");
  fail(p, "(" + run + ") stopped: " + mismatch);
  return p;
}

PropertyResult check_collective_symmetry(const std::vector<const CheckRun*>& runs) {
  PropertyResult p = make("collective_symmetry", run_list(runs));
  std::int64_t groups = 0, calls = 0;
  for (const CheckRun* run : runs) {
    std::map<std::pair<std::string, std::vector<int>>, std::pair<int, GroupCalls>> first;
    for (const RankRun& r : run->ranks)
      for (const auto& [axis, g] : r.collectives) {
        auto [it, inserted] = first.try_emplace({axis, g.ranks}, r.rank, g);
        if (inserted) {
          // A group of one member has no peer to compare with.
          if (g.ranks.size() > 1) {
            ++groups;
            calls += g.calls;
          }
          continue;
        }
        const GroupCalls& f = it->second.second;
        if (f.calls != g.calls || f.hash != g.hash)
          fail(p, "(" + run->name + ") " + axis + " group: rank " +
                      std::to_string(it->second.first) + " issued " + std::to_string(f.calls) +
                      " collectives (hash " + f.hash + "), rank " + std::to_string(r.rank) + " " +
                      std::to_string(g.calls) + " (hash " + g.hash + ")");
      }
    if (run->ranks.empty() || run->ranks[0].collectives.empty())
      fail(p, "(" + run->name + ") reported no collective hashes");
  }
  if (p.status == Status::pass && groups == 0)
    return skip(p, "every group has one member: no rank has a peer to compare with",
                "use --tp 2 (or --cp 2, --dp 2)");
  if (p.status == Status::pass)
    p.reason = std::to_string(groups) +
               " groups of 2 or more ranks, every member issued the "
               "identical sequence (" +
               std::to_string(calls) + " calls in all, one member each)";
  return p;
}

namespace {
class CollectiveSymmetry final : public Property {
 public:
  std::string_view name() const override { return "collective_symmetry"; }
  std::string_view doc() const override {
    return "the ranks of every group issue the same collectives (count and fingerprint hash)";
  }
  std::string_view needs() const override {
    return "a group of two or more ranks (--tp, --cp or --dp > 1)";
  }
  // Every run the others need: it compares each run's own groups.
  std::vector<RunVariant> runs_needed(const RunConfig&) const override { return {}; }
  PropertyResult evaluate(const CheckRuns& runs, std::vector<MetricComparison>*) const override {
    return check_collective_symmetry(runs.all());
  }
  std::optional<ClaimedFailure> claim_failure(const std::string& run,
                                              const FailureReport& failure) const override {
    // A rank stopped by a fingerprint mismatch (--check-collectives): the claim
    // this property makes, broken live.
    for (const RankFailure& f : failure.ranks)
      if (f.thrown == ThrownError::collective_mismatch)
        return ClaimedFailure{"collective mismatch",
                              collective_symmetry_mismatch_failure(run, one_line(f.detail, 300))};
    return std::nullopt;
  }
};
}  // namespace

PARITY_REGISTER_PROPERTY(CollectiveSymmetry, 7)

}  // namespace parity::checks
