#pragma once
// Real CUDA graphs behind the phase state machine every backend shares
// (harness/graphs/graph_runner.h; docs/graph-phases.md, contract.md section 3).
//
//   per-layer capture - the region's host code runs once under stream capture
//       on a side stream (thread-local capture mode: other thread ranks keep
//       running on their own streams), into a private graph memory pool, with
//       the rank's generators registered so dropout draws advance their Philox
//       offsets on every replay. Static inputs are filled with the recorded
//       inputs; the outputs of the capture become the static output buffers.
//   per-layer replay - the shared replay function: the inputs are copied into
//       the static inputs and the graph is launched (no host code runs, so no
//       site fires); backward recomputes the region eagerly from this call's
//       inputs and RNG state, so a later replay overwriting the static buffers
//       never corrupts an earlier microbatch's gradients.
//   full iteration - begin/end_iteration_capture bracket the body's one host
//       execution with a capture; the parameters' .grad tensors the captured
//       backward wrote are the static gradient buffers, handed back to the
//       parameters after every replay (the step resets .grad before it).
//
// Nothing here synchronizes with the host: a replay is a launch on the rank's
// stream. Collectives inside a captured region must be capturable (NCCL);
// the host-staged transport refuses to run under capture (device_transport.h).
#include <c10/core/Device.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "harness/graphs/graph_runner.h"
#include "harness/parallel/rank_status.h"

namespace at::cuda {
struct CUDAGraph;
}  // namespace at::cuda
namespace c10::cuda {
class CUDAStreamGuard;
}  // namespace c10::cuda

namespace parity::gpu {

class CudaGraphRunner final : public PhasedGraphRunner {
 public:
  explicit CudaGraphRunner(c10::DeviceIndex device);
  ~CudaGraphRunner() override;

 protected:
  // A capture leaves memory unwritten: nothing to emulate.
  void poison(const at::Tensor&) override {}
  void capture_region(GraphRegion& region) override;
  std::vector<at::Tensor> replay_region(GraphRegion& region,
                                        const std::vector<at::Tensor>& inputs) override;
  std::vector<at::Tensor> replay_iteration(GraphRegion& iteration) override;
  void begin_iteration_capture() override;
  void end_iteration_capture(bool completed) override;

 private:
  // Starts a capture of `graph` on the side stream (the current stream waits
  // for nothing; the side stream waits for the current one first).
  void begin_capture(at::cuda::CUDAGraph& graph);
  // Ends it, instantiates the graph and makes the current stream wait for it.
  void end_capture(at::cuda::CUDAGraph& graph);

  c10::DeviceIndex device_;
  std::map<std::string, std::unique_ptr<at::cuda::CUDAGraph>> region_graphs_;
  std::unique_ptr<at::cuda::CUDAGraph> iteration_graph_;
  std::unique_ptr<c10::cuda::CUDAStreamGuard> capture_stream_;
  std::optional<GraphCaptureScope> capturing_;  // the hang guard pauses meanwhile
  std::vector<at::Tensor> static_gradients_;
};

}  // namespace parity::gpu
