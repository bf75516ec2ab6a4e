#pragma once
// Every LibTorch version difference parity cares about, in one place.
// Debian's LibTorch 1.13 (CPU machines) and pip torch's LibTorch 2.x (GPU machines).
#include <torch/csrc/api/include/torch/version.h>

#include <chrono>
#include <cstddef>
#include <cstdlib>

#define PARITY_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||         \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace parity::compat {
// Gloo in 1.13 has no reduce_scatter / _allgather_base and no bf16 or AVG;
// 2.x Gloo has reduce_scatter on CPU for some dtypes. The reference transport
// keeps one portable path and uses the native call only where this says so.
// Upstream ProcessGroupGloo::reduce_scatter throws "does not support
// reduce_scatter" in 1.13 and in the 2.x releases checked (DTensor falls back
// to all-reduce + chunk for Gloo too), so this stays false until a release with
// a native CPU reduce_scatter is verified; then put its version here.
inline constexpr bool kGlooHasReduceScatter = false;
inline constexpr bool kGlooHasBFloat16 = PARITY_TORCH_AT_LEAST(2, 0);
}  // namespace parity::compat

namespace parity::compat {
// c10d::TCPStoreOptions for a TCPStore rendezvous. 1.13 and 2.x both take
// TCPStore(host, TCPStoreOptions) with these fields (2.x adds more, e.g.
// useLibUV, whose defaults we keep). A template so this header needs no c10d
// include: call it as tcp_store_options<c10d::TCPStoreOptions>(...).
template <typename TCPStoreOptionsT>
TCPStoreOptionsT tcp_store_options(unsigned short port, int world_size, bool is_server,
                                   std::chrono::milliseconds timeout) {
  TCPStoreOptionsT o;
  o.port = port;
  o.isServer = is_server;
  o.numWorkers = static_cast<std::size_t>(world_size);
  o.waitWorkers = false;  // ranks wait for each other in the store, with the timeout
  o.timeout = timeout;
  return o;
}
}  // namespace parity::compat

namespace parity::compat {
// TCPStore's wire protocol changed in torch 2.1 (pytorch #107607): a client's
// first message must be VALIDATE with a magic number, and every query type moved
// up by one. A pre-2.1 client and a 2.1+ server (torchrun's agent store) do not
// understand each other; no message is safe to send both ways (a pre-2.1 server
// reads the magic as a key length).
inline constexpr bool kTcpStoreValidatesClients = PARITY_TORCH_AT_LEAST(2, 1);
inline constexpr const char* kLibTorchVersion = TORCH_VERSION;
}  // namespace parity::compat

namespace parity::compat {
// LibTorch 2.x records every c10d collective in a process-wide FlightRecorder
// (on by default, TORCH_FR_BUFFER_SIZE 2000). Its record path inserts into a map
// before taking its mutex, so several process groups recording from several
// threads at once - parity's thread ranks, 16 ranks x 4 groups in one process -
// corrupt it (a SIGSEGV in std::_Rb_tree_insert_and_rebalance under
// FlightRecorder::recordWithResetEnabled, seen with torch 2.11 on the GPU machine).
// parity keeps its own collective fingerprints, so the recorder is switched off
// before the first process group exists, unless the user set it. 1.13 has none.
inline void disable_flight_recorder_unless_set() {
#if PARITY_TORCH_AT_LEAST(2, 0)
  ::setenv("TORCH_FR_BUFFER_SIZE", "0", /*overwrite=*/0);
#endif
}
}  // namespace parity::compat
