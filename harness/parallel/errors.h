#pragma once
// Exception types of the simulated-rank runtime. All derive from ParallelError
// (a std::runtime_error) so a launcher can catch the runtime's failures in one
// place; their messages are one line (no backtraces) and name the call.
#include <stdexcept>
#include <string>

namespace parity {

class ParallelError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A collective failed (transport error, peer gone, bad argument seen by the
// transport). The message ends with the call's description.
class CollectiveError : public ParallelError {
 public:
  using ParallelError::ParallelError;
};

// --check-collectives found ranks of one group issuing different calls.
// The message names both global ranks and both calls.
class CollectiveMismatch : public CollectiveError {
 public:
  using CollectiveError::CollectiveError;
};

// A collective did not complete within the group's timeout (a peer never
// called, hung or died).
class CollectiveTimeout : public CollectiveError {
 public:
  using CollectiveError::CollectiveError;
};

// A store could not be created or reached: bind/connect failure, bad file path,
// rendezvous timed out. The message says which, with host and port or path.
class RendezvousError : public ParallelError {
 public:
  using ParallelError::ParallelError;
};

}  // namespace parity
