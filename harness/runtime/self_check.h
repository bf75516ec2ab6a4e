#pragma once
// The runtime self-check rank program ("self-check"): what `parity check` runs
// until the model exists. Every rank checks its group memberships and runs
// all_reduce (sum, max, min), all_gather, reduce_scatter, broadcast and barrier
// on the world, tp, cp and dp groups (and ep, with the uneven all_to_all, when
// ep > 1) with values derived from its rank, checks every result against the
// value computed from the topology, and passes its fault point midway (after
// the world and tp groups, before cp and dp).
#include <string>

#include <nlohmann/json.hpp>

namespace parity {

struct RankContext;
struct LaunchResult;

inline constexpr const char* kSelfCheckProgram = "self-check";

// {"rank", "coordinates": {tp, cp, dp}, "groups": {"tp": [...], ...},
//  "checks": N, "failures": [...], "ok": bool, "collectives": N}
nlohmann::json run_self_check(RankContext& ctx);

// A small table, one row per rank, for `parity check`.
std::string format_self_check_table(const LaunchResult& result);
// True when every rank's result came back with "ok": true.
bool self_check_passed(const LaunchResult& result);

}  // namespace parity
