#pragma once
// The three launch modes behind launch(). Internal to harness/runtime.
#include <memory>
#include <string>
#include <vector>

#include "harness/runtime/supervisor.h"

namespace parity {

// Runs `ranks` of `run` as threads of this process, under the supervisor.
std::vector<Slot> run_rank_threads(const std::shared_ptr<RankRun>& run,
                                   const std::vector<int>& ranks,
                                   SupervisorClock::time_point start);

LaunchResult launch_threads(const LaunchSpec& spec, const RankProgram& program,
                            const nlohmann::json& arguments);
LaunchResult launch_env(const LaunchSpec& spec, const RankProgram& program,
                        const nlohmann::json& arguments);
LaunchResult launch_processes(const LaunchSpec& spec, const std::string& program,
                              const nlohmann::json& arguments);

}  // namespace parity
