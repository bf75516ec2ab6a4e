#pragma once
// How `parity mutants` shapes a generated scenario so that a fault can show:
// some faults live on a code path that a random scenario seldom takes (an EP
// rank without tokens, the MoE tracker under recompute, a replayed router).
// One place decides, per fault, what the scenario must have; the shaped case is
// what the hunt checks and shrinks, so the shrunk scenario reproduces as printed.
#include "harness/config/run_config.h"
#include "harness/faults/code_path_faults.h"

namespace parity::scenarios {

// Shapes `scenario` for `fault` in place. False when the case cannot show the
// fault (its layout cannot hold what the fault needs, or the shaped scenario is
// not a valid run): the hunt skips it without a check.
bool shape_for_fault(RunConfig& scenario, CodePathFault fault);

}  // namespace parity::scenarios
