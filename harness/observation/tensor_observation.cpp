// placeholder until the observation work lands
#include "harness/observation/tensor_observation.h"
namespace parity::detail {
thread_local ObservationState observation_state;
}
