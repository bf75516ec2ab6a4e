#pragma once
// Rank programs of the runtime tests, registered in the test binary (threads
// mode) and in parity_test_worker (processes mode: the worker re-executed per
// rank must know them by name). Each reads its parameters from its arguments.
namespace parity::testing {

// "test-beating-compute" {"seconds": S, "beat_ms": B}: collective-free work
//   for at least S seconds (wall clock), beating every B ms through the step
//   loop's heartbeat; returns {"beats": n}.
// "test-stall-after-beat" {}: beats once at step 7, microbatch 3, layer 2
//   (forward), then runs without progress until the supervisor stops it.
// "test-slow-unwind" {"culprit": R, "unwind_seconds": U}: a world barrier,
//   then rank R throws "culprit threw"; every other rank waits for the stop
//   and then needs U more seconds to end (threads: after the cancel; processes:
//   it ignores SIGTERM, so only the supervisor's SIGKILL ends it).
// "test-slow-model" (a RunConfig): the "model" program with every
//   residual_accumulator observation (one per layer forward) taking
//   kSlowModelSecondsPerLayer more: slow compute between the step loop's
//   heartbeats, deterministic on any machine.
// "test-gated-model" (a RunConfig): the "model" program whose step 1 waits,
//   at its first observation, until the file named by the environment variable
//   kStepGateVariable exists (without the variable: the model program as is).
//   It does not beat while it waits: a gate nobody opens ends as a hang.
void register_test_rank_programs();
// Registers test-gated-model under the name "model" too (parity run launches
// that name); register_rank_program(kModelProgram, run_model_program) undoes it.
void register_gated_model_as_model();

inline constexpr double kSlowModelSecondsPerLayer = 0.4;
inline constexpr const char* kStepGateVariable = "PARITY_TEST_STEP_GATE";

}  // namespace parity::testing
