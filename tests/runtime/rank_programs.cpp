#include "tests/runtime/rank_programs.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <thread>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "harness/driver/training_step.h"
#include "harness/observation/execution_point.h"
#include "harness/observation/tensor_observation.h"
#include "harness/parallel/communicator.h"
#include "harness/runtime/launcher.h"

namespace parity::testing {
namespace {

using Clock = std::chrono::steady_clock;

nlohmann::json beating_compute(RankContext& ctx) {
  const auto seconds = std::chrono::duration<double>(ctx.arguments.at("seconds").get<double>());
  const auto beat = std::chrono::milliseconds(ctx.arguments.at("beat_ms").get<int>());
  const auto until = Clock::now() + seconds;
  std::int64_t beats = 0;
  for (std::int64_t microbatch = 0; Clock::now() < until; ++microbatch) {
    ExecutionPointScope point(ExecutionPoint{0, microbatch, GraphPhase::eager});
    for (std::int64_t layer = 0; layer < 4 && Clock::now() < until; ++layer) {
      step_heartbeat(StepPass::forward, layer);
      ++beats;
      std::this_thread::sleep_for(beat);  // the layer's compute, without a collective
    }
  }
  return {{"beats", beats}};
}

nlohmann::json stall_after_beat(RankContext& ctx) {
  {
    ExecutionPointScope point(ExecutionPoint{7, 3, GraphPhase::eager});
    step_heartbeat(StepPass::forward, 2);
  }
  // No progress from here on: in threads mode the supervisor's cancel ends it,
  // in processes mode its SIGTERM.
  while (!ctx.cancel.wait_for(std::chrono::milliseconds(50))) {
  }
  throw RankCancelled();
}

nlohmann::json slow_unwind(RankContext& ctx) {
  const int culprit = ctx.arguments.at("culprit").get<int>();
  const auto unwind =
      std::chrono::duration<double>(ctx.arguments.at("unwind_seconds").get<double>());
  if (ctx.own_process && ctx.rank != culprit) ::signal(SIGTERM, SIG_IGN);
  ctx.group(Axis::world).barrier();  // every survivor is past its start-up
  if (ctx.rank == culprit) throw std::runtime_error("culprit threw");
  if (ctx.own_process) {
    // Only the supervisor's SIGKILL ends this process.
    std::this_thread::sleep_for(unwind * 100);
    return {{"unwound", false}};
  }
  ctx.cancel.wait();
  std::this_thread::sleep_for(unwind);  // as a rank blocked in a collective until its timeout
  throw RankCancelled();
}

nlohmann::json slow_model(RankContext& ctx) {
  const auto per_layer = std::chrono::duration<double>(kSlowModelSecondsPerLayer);
  TensorObservationCapture slow(
      [per_layer](const ObservationOwner&, std::string_view, SourceKind, const at::Tensor&,
                  OptionalDim, OptionalDim,
                  OptionalDim) { std::this_thread::sleep_for(per_layer); },
      KindSet{SourceKind::residual_accumulator});
  return run_model_program(ctx);
}

nlohmann::json gated_model(RankContext& ctx) {
  const char* gate = std::getenv(kStepGateVariable);
  if (gate == nullptr) return run_model_program(ctx);
  const std::string path = gate;
  bool passed = false;
  TensorObservationCapture wait_at_step_1(
      [&](const ObservationOwner&, std::string_view, SourceKind, const at::Tensor&, OptionalDim,
          OptionalDim, OptionalDim) {
        if (passed || current_execution_point().step < 1) return;
        while (::access(path.c_str(), F_OK) != 0) {
          ctx.check_cancelled();
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        passed = true;
      },
      KindSet{SourceKind::residual_accumulator});
  return run_model_program(ctx);
}

}  // namespace

void register_gated_model_as_model() { register_rank_program(kModelProgram, gated_model); }

void register_test_rank_programs() {
  register_rank_program("test-beating-compute", beating_compute);
  register_rank_program("test-stall-after-beat", stall_after_beat);
  register_rank_program("test-slow-unwind", slow_unwind);
  register_rank_program("test-slow-model", slow_model);
  register_rank_program("test-gated-model", gated_model);
}

}  // namespace parity::testing
