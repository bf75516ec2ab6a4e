// collective_symmetry: all ranks of a group issue identical collective sequences,
// and every point-to-point message one rank sent another received as sent.
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

namespace {

// Rank a's sends to b against rank b's receives from a: the count and the
// chain of pair fingerprints (peer, channel, order, message id, dtype, shape).
// Returns the messages compared.
std::int64_t compare_point_to_point(const CheckRun& run, PropertyResult& p) {
  std::map<std::pair<int, int>, const PeerMessages*> from_to;  // (rank, peer) -> record
  for (const RankRun& r : run.ranks)
    for (const PeerMessages& m : r.point_to_point) from_to[{r.rank, m.peer}] = &m;
  std::int64_t messages = 0;
  for (const auto& [key, sent] : from_to) {
    const auto [a, b] = key;
    auto it = from_to.find({b, a});
    const std::int64_t received = it == from_to.end() ? 0 : it->second->recvs;
    const std::string received_hash = it == from_to.end() ? "none" : it->second->recv_hash;
    if (sent->sends != received || (sent->sends > 0 && sent->send_hash != received_hash)) {
      fail(p, "(" + run.name + ") point-to-point: rank " + std::to_string(a) + " sent " +
                  std::to_string(sent->sends) + " message(s) to rank " + std::to_string(b) +
                  " (hash " + sent->send_hash + "), rank " + std::to_string(b) + " received " +
                  std::to_string(received) + " from it (hash " + received_hash +
                  "): a message was received as something it was not sent as (its order, "
                  "shape, dtype or id)");
      continue;
    }
    messages += sent->sends;
  }
  for (const auto& [key, record] : from_to)
    if (record->recvs > 0 && !from_to.count({key.second, key.first}))
      fail(p, "(" + run.name + ") point-to-point: rank " + std::to_string(key.first) +
                  " received " + std::to_string(record->recvs) + " message(s) from rank " +
                  std::to_string(key.second) + ", which reports none sent to it");
  return messages;
}

}  // namespace

PropertyResult check_collective_symmetry(const std::vector<const CheckRun*>& runs) {
  PropertyResult p = make("collective_symmetry", run_list(runs));
  std::int64_t groups = 0, calls = 0, messages = 0;
  for (const CheckRun* run : runs) {
    messages += compare_point_to_point(*run, p);
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
               std::to_string(calls) + " calls in all, one member each)" +
               (messages > 0
                    ? "; " + std::to_string(messages) + " point-to-point messages received as sent"
                    : "");
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
