#pragma once
// Graph phases (contract.md section 3, docs/graph-phases.md): the phase state
// machine every backend's graph runner shares. What is backend-specific - how a
// capture executes (CUDA: stream capture, kernels do not run; the reference: host
// code runs on NaN-poisoned buffers) and how a replay executes (CUDA: graph
// launch; the reference: the region's math with notifications that reach no
// callback) - is left to three hooks a backend implements.
//
// Per-layer ("local" graphs, whole-layer capture):
//   record   - until create_graphs(): each region runs eagerly; the first call's
//              inputs are cloned for warmup/capture; sites inside fire normally.
//   warmup   - create_graphs(): K eager runs of each region on the cloned inputs
//              (grad on, a backward via autograd::grad with zero output grads that
//              leaves .grad alone), checkpoints bypassed, ExecutionPoint step -1.
//   capture  - then one capture per region: host code runs once, contents undefined;
//              the kinds is_observing_tensor answers at that moment are frozen.
//   replay   - every later call: no host code inside the region runs; notifications
//              inside are absent, is_observing answers inside are the frozen ones,
//              outputs land in static buffers reused by every replay.
// Full-iteration: run_iteration(body): iterations < K eager, iteration K captured
// (host code once, contents undefined) then replayed, later iterations replayed.
//
// The RNG tracker is put back after warmup and capture, so the first replay
// draws what an eager step would have drawn (replays compare bit for bit with
// eager runs).
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "harness/backend/backend.h"
#include "harness/observation/source_kind.h"

namespace parity {

using GraphOptions = GraphSettings;

// One graphed region (a transformer layer) and its buffers.
struct GraphRegion {
  std::string name;
  RegionFn fn;                              // the host code, as recorded (replays use this one)
  bool clone_outputs = false;               // the last layer hands out clones (Megatron)
  std::vector<at::Tensor> recorded_inputs;  // detached clones from the record step
  std::vector<bool> input_requires_grad;
  std::vector<at::Tensor> static_inputs;   // backend-owned, written by every replay
  std::vector<at::Tensor> static_outputs;  // backend-owned, written by every replay
  KindSet frozen_kinds;                    // is_observing answers at capture
  std::int64_t warmups = 0;
  std::int64_t replays = 0;
  bool captured = false;
};

// The kinds for which is_observing_tensor answers true on this thread now.
KindSet live_observation_kinds();

class PhasedGraphRunner : public GraphRunner {
 public:
  bool supports(GraphMode) const override { return true; }
  void configure(const GraphOptions& options) override { options_ = options; }
  const GraphOptions& options() const { return options_; }

  // ---- per-layer ----
  // Runs region `name` (its host code is `fn`) under the phase rules. Before
  // create_graphs: record (eager). After: replay (`fn` is ignored; the recorded
  // host code stands for the captured graph). If the ExecutionPoint's step moved
  // past the record step and create_graphs was not called, it is called first.
  // With graphs none/full_iteration: fn(inputs).
  std::vector<at::Tensor> run_region(const std::string& name, const RegionFn& fn,
                                     const std::vector<at::Tensor>& inputs,
                                     bool clone_outputs) override;
  // Megatron's create_cudagraphs (after the first step): warmup + capture of
  // every recorded region, in recorded order. A no-op when already created,
  // when nothing was recorded, or outside per-layer mode.
  void create_graphs();
  // Per-layer: create_graphs(); otherwise nothing.
  void end_step() override;
  bool graphs_created() const { return created_; }
  const std::vector<GraphRegion>& regions() const { return regions_; }

  // ---- full-iteration ----
  // Megatron's FullCudaGraphWrapper around forward_backward: iteration < K runs
  // body eagerly; iteration K runs it once under capture on static copies of
  // `inputs` (contents undefined), between begin_iteration_capture() and
  // end_iteration_capture(), and then replays it; later iterations copy
  // `inputs` into the static inputs and replay only. Outside full-iteration
  // mode: body(inputs).
  std::vector<at::Tensor> run_iteration(const RegionFn& body,
                                        const std::vector<at::Tensor>& inputs) override;
  void set_static_parameters(const std::vector<at::Tensor>& parameters) override {
    static_parameters_ = parameters;
  }
  std::int64_t iterations() const { return iteration_; }
  // The model calls this on the first activation it computes (the embedding
  // output): during a full-iteration capture the backend poisons it (the
  // reference fills it with NaN; every tensor computed from it is then NaN).
  void poison_if_capturing(const at::Tensor& t) override;

  // The thread's ExecutionPoint phase (the runner sets it with GraphPhaseScope).
  GraphPhase phase() const override;

 protected:
  // Fills `t`'s memory with what a capture leaves there (reference: NaN;
  // CUDA: nothing, the memory is simply not written).
  virtual void poison(const at::Tensor& t) = 0;
  // Captures `region` (phase capture is set, ExecutionPoint step -1, grad on):
  // must create region.static_inputs / static_outputs and run the host code once.
  virtual void capture_region(GraphRegion& region) = 0;
  // Replays `region` on `inputs` (phase replay is set): differentiable with
  // respect to the inputs and the parameters the region uses.
  virtual std::vector<at::Tensor> replay_region(GraphRegion& region,
                                                const std::vector<at::Tensor>& inputs) = 0;
  // Replays the captured iteration (phase replay is set; `iteration` holds the
  // static inputs, already refilled, and the outputs of the capture). Returns
  // the iteration's outputs.
  virtual std::vector<at::Tensor> replay_iteration(GraphRegion& iteration) = 0;

  // The replay of a per-layer region both backends share: an autograd function
  // whose forward copies `inputs` into the region's static inputs and calls
  // `execute` (which must leave the results in region.static_outputs), and
  // whose backward recomputes the region eagerly from clones of this call's
  // inputs with the RNG state of this call, suspended, and back-propagates -
  // so a later replay overwriting the static buffers never corrupts an earlier
  // microbatch's gradients. Returns aliases of the static outputs (clones for
  // the last layer, as Megatron does). Checks shapes and dtypes first.
  std::vector<at::Tensor> replay_with_recompute_backward(
      GraphRegion& region, const std::vector<at::Tensor>& inputs,
      const std::function<void(GraphRegion&)>& execute);
  const std::vector<at::Tensor>& static_parameters() const { return static_parameters_; }

 private:
  GraphRegion* find(const std::string& name);

  GraphOptions options_;
  std::vector<GraphRegion> regions_;
  bool created_ = false;
  bool recorded_step_known_ = false;
  std::int64_t recorded_step_ = -1;
  std::int64_t iteration_ = 0;
  GraphRegion iteration_region_;  // full-iteration: static inputs and outputs
  std::vector<at::Tensor> static_parameters_;
};

}  // namespace parity
