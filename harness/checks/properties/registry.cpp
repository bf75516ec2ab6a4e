// The registry: every property this backend evaluates, in report order
// (contract.md section 5's order). A new property is a file beside this one
// plus one line here.
#include "harness/checks/properties.h"

namespace parity::checks {

const std::vector<const Property*>& registered_properties() {
  static const std::vector<const Property*> properties = {
      &exactly_once_property(),        &recompute_invariance_property(),
      &sharded_reduction_property(),   &graph_replay_property(),
      &backend_parity_property(),      &determinism_property(),
      &collective_symmetry_property(), &router_invariance_property(),
      &replica_consistency_property(), &sharded_gradients_property(),
  };
  return properties;
}

}  // namespace parity::checks
