#include "cuda/cuda_graph_runner.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <stdexcept>

#include "harness/base/check.h"

namespace parity::gpu {
namespace {

bool floating(const at::Tensor& t) { return t.defined() && at::isFloatingType(t.scalar_type()); }

// The capture failed or the body threw: end the capture (discarding the
// graph) without masking the original exception.
void abandon(at::cuda::CUDAGraph& graph) {
  try {
    graph.capture_end();
  } catch (const std::exception&) {
    // The capture was invalidated; the body's exception says why.
  }
}

}  // namespace

CudaGraphRunner::CudaGraphRunner(c10::DeviceIndex device) : device_(device) {}
CudaGraphRunner::~CudaGraphRunner() = default;

void CudaGraphRunner::begin_capture(at::cuda::CUDAGraph& graph) {
  const at::cuda::CUDAStream current = at::cuda::getCurrentCUDAStream(device_);
  const at::cuda::CUDAStream side = at::cuda::getStreamFromPool(/*isHighPriority=*/false, device_);
  // The side stream starts where the rank's stream is (inputs written there).
  at::cuda::CUDAEvent ready;
  ready.record(current);
  ready.block(side);
  capture_stream_ = std::make_unique<c10::cuda::CUDAStreamGuard>(side);
  capturing_.emplace();
  // Dropout draws inside the graph advance these generators' Philox offsets on
  // every replay (the default generator is registered by capture_begin).
  if (RngTracker* rng = options().rng) {
    for (RngStream s : {RngStream::data_parallel, RngStream::model_parallel})
      graph.register_generator_state(rng->generator(s));
  }
  // Thread-local: thread ranks sharing the device keep working during a capture.
  graph.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
}

void CudaGraphRunner::end_capture(at::cuda::CUDAGraph& graph) {
  const at::cuda::CUDAStream side = at::cuda::getCurrentCUDAStream(device_);
  try {
    graph.capture_end();  // instantiates the graph
  } catch (...) {
    capture_stream_.reset();
    capturing_.reset();
    throw;
  }
  capture_stream_.reset();
  capturing_.reset();
  at::cuda::CUDAEvent done;
  done.record(side);
  done.block(at::cuda::getCurrentCUDAStream(device_));
}

void CudaGraphRunner::capture_region(GraphRegion& r) {
  r.static_inputs.clear();
  r.static_outputs.clear();
  std::vector<at::Tensor> in;
  for (size_t i = 0; i < r.recorded_inputs.size(); ++i) {
    at::Tensor s = r.recorded_inputs[i].clone();  // device memory every replay reads
    r.static_inputs.push_back(s);
    at::Tensor t = s.detach();
    if (r.input_requires_grad[i] && floating(t)) t.requires_grad_(true);
    in.push_back(t);
  }
  auto graph = std::make_unique<at::cuda::CUDAGraph>();
  begin_capture(*graph);
  std::vector<at::Tensor> outs;
  try {
    outs = r.fn(in);  // host code once; the kernels are recorded, not run
  } catch (...) {
    abandon(*graph);
    capture_stream_.reset();
    capturing_.reset();
    throw;
  }
  end_capture(*graph);
  // The capture's outputs live in the graph's private pool: every replay writes them.
  for (const at::Tensor& o : outs) r.static_outputs.push_back(o.detach());
  region_graphs_[r.name] = std::move(graph);
}

std::vector<at::Tensor> CudaGraphRunner::replay_region(GraphRegion& region,
                                                       const std::vector<at::Tensor>& inputs) {
  auto it = region_graphs_.find(region.name);
  PARITY_CHECK_INTERNAL(it != region_graphs_.end(),
                        "graph region " + region.name + " has no CUDA graph");
  at::cuda::CUDAGraph* graph = it->second.get();
  return replay_with_recompute_backward(region, inputs, [graph](GraphRegion&) {
    graph->replay();  // a launch on the rank's stream; no host code, no site fires
  });
}

void CudaGraphRunner::begin_iteration_capture() {
  iteration_graph_ = std::make_unique<at::cuda::CUDAGraph>();
  begin_capture(*iteration_graph_);
}

void CudaGraphRunner::end_iteration_capture(bool completed) {
  if (!completed) {
    abandon(*iteration_graph_);
    capture_stream_.reset();
    capturing_.reset();
    iteration_graph_.reset();
    return;
  }
  end_capture(*iteration_graph_);
  // The captured backward wrote these .grad tensors (allocated in the graph's
  // pool during capture): the static gradient buffers of every replay.
  static_gradients_.clear();
  for (const at::Tensor& p : static_parameters()) static_gradients_.push_back(p.grad());
}

std::vector<at::Tensor> CudaGraphRunner::replay_iteration(GraphRegion& iteration) {
  PARITY_CHECK_INTERNAL(iteration_graph_, "full-iteration graph was not captured");
  iteration_graph_->replay();
  const std::vector<at::Tensor>& params = static_parameters();
  for (size_t i = 0; i < params.size() && i < static_gradients_.size(); ++i) {
    at::Tensor p = params[i];
    p.mutable_grad() = static_gradients_[i];
  }
  return iteration.static_outputs;
}

}  // namespace parity::gpu
