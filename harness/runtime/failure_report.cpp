#include "harness/runtime/failure_report.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <map>

#include <nlohmann/json.hpp>

namespace parity {

std::string_view to_string(RankFailureKind kind) {
  switch (kind) {
    case RankFailureKind::threw:
      return "threw";
    case RankFailureKind::crashed:
      return "crashed";
    case RankFailureKind::hung:
      return "hung";
    case RankFailureKind::exited:
      return "exited";
    case RankFailureKind::stopped:
      return "stopped";
  }
  return "?";
}

std::string_view to_string(ThrownError thrown) {
  switch (thrown) {
    case ThrownError::other:
      return "other";
    case ThrownError::collective_mismatch:
      return "collective_mismatch";
    case ThrownError::collective_timeout:
      return "collective_timeout";
  }
  return "?";
}

std::string describe_signal(int signal) {
  static const std::map<int, const char*> names = {
      {SIGABRT, "SIGABRT"}, {SIGSEGV, "SIGSEGV"}, {SIGKILL, "SIGKILL"}, {SIGTERM, "SIGTERM"},
      {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},   {SIGILL, "SIGILL"},   {SIGINT, "SIGINT"},
      {SIGPIPE, "SIGPIPE"}, {SIGHUP, "SIGHUP"},   {SIGQUIT, "SIGQUIT"}, {SIGTRAP, "SIGTRAP"}};
  auto it = names.find(signal);
  return "signal " + std::to_string(signal) +
         (it != names.end() ? std::string(" ") + it->second : "");
}

std::string format_rank_failure(const RankFailure& f) {
  std::string line = "rank " + std::to_string(f.rank) + " " + to_string(f.coordinates) + " ";
  if (f.victim) line += "victim, ";
  switch (f.kind) {
    case RankFailureKind::threw:
      line += "threw: " + f.detail;
      break;
    case RankFailureKind::crashed:
      line += "crashed (" + f.detail + ")";
      break;
    case RankFailureKind::hung:
      line += "hung: " + f.detail;
      break;
    case RankFailureKind::exited:
      line += "exited: " + f.detail;
      break;
    case RankFailureKind::stopped:
      line += "stopped by the supervisor: " + f.detail;
      break;
  }
  line +=
      "; last collective: " + (f.last_collective.empty() ? std::string("none") : f.last_collective);
  if (!f.last_step_point.empty()) line += "; last step point: " + f.last_step_point;
  return line;
}

void FailureReport::sort() {
  std::stable_sort(ranks.begin(), ranks.end(), [](const RankFailure& a, const RankFailure& b) {
    if (a.victim != b.victim) return !a.victim;
    if (!a.victim && a.seconds != b.seconds) return a.seconds < b.seconds;
    return a.rank < b.rank;
  });
}

std::string FailureReport::headline() const {
  std::vector<const RankFailure*> culprits;
  int victims = 0;
  for (const RankFailure& f : ranks) {
    if (f.victim)
      ++victims;
    else
      culprits.push_back(&f);
  }
  std::string h = "run failed: ";
  for (std::size_t i = 0; i < culprits.size(); ++i) {
    if (i) h += ", ";
    h += "rank " + std::to_string(culprits[i]->rank) + " " +
         std::string(culprits[i]->kind == RankFailureKind::stopped ? "was stopped"
                                                                   : to_string(culprits[i]->kind));
  }
  if (culprits.empty()) h += "no rank reported a failure";
  if (victims) h += ", " + std::to_string(victims) + (victims == 1 ? " victim" : " victims");
  char timeout[32];
  std::snprintf(timeout, sizeof timeout, "%g", timeout_seconds);
  h += " (launch " + std::string(launch_mode_name(launch)) + ", world " +
       std::to_string(world_size) + ", timeout " + timeout + " s)";
  return h;
}

std::vector<std::string> FailureReport::lines() const {
  std::vector<std::string> out{headline()};
  for (const RankFailure& f : ranks) out.push_back("  " + format_rank_failure(f));
  if (abandoned_threads)
    out.push_back("  " + std::to_string(abandoned_threads) +
                  " rank thread(s) did not stop after the run was stopped and were left running");
  return out;
}

std::string FailureReport::text() const {
  std::string out;
  for (const std::string& l : lines()) out += (out.empty() ? "" : "\n") + l;
  return out;
}

nlohmann::json FailureReport::to_json() const {
  nlohmann::json j;
  j["launch"] = std::string(launch_mode_name(launch));
  j["timeout"] = timeout_seconds;
  j["world_size"] = world_size;
  j["headline"] = headline();
  j["abandoned_threads"] = abandoned_threads;
  j["ranks"] = nlohmann::json::array();
  for (const RankFailure& f : ranks) {
    nlohmann::json coordinates = {
        {"tp", f.coordinates.tp}, {"cp", f.coordinates.cp}, {"dp", f.coordinates.dp}};
    if (f.coordinates.pipelined) coordinates["pp"] = f.coordinates.pp;
    j["ranks"].push_back({{"rank", f.rank},
                          {"coordinates", coordinates},
                          {"kind", std::string(to_string(f.kind))},
                          {"victim", f.victim},
                          {"in_collective", f.in_collective},
                          {"detail", f.detail},
                          {"last_collective", f.last_collective},
                          {"last_step_point", f.last_step_point},
                          {"seconds", f.seconds},
                          {"line", format_rank_failure(f)}});
  }
  return j;
}

}  // namespace parity
