// parity_test_worker: the processes-mode worker of the runtime tests. It is
// `parity __rank-worker` with the test rank programs (rank_programs.h) added,
// so processes-mode ranks can run programs the parity binary does not ship.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "harness/driver/training_step.h"
#include "harness/runtime/launcher.h"
#include "tests/runtime/rank_programs.h"

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "__rank-worker") == 0) {
    parity::register_model_program();
    parity::testing::register_test_rank_programs();
    // A test of parity run's streamed rows holds step 1 back (rank_programs.h).
    if (std::getenv(parity::testing::kStepGateVariable) != nullptr)
      parity::testing::register_gated_model_as_model();
    return parity::run_rank_worker(argc - 2, argv + 2);
  }
  std::fprintf(stderr, "parity_test_worker: only `__rank-worker ...` (processes-mode ranks)\n");
  return 2;
}
