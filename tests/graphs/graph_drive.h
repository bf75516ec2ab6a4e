#pragma once
// Drives a GPTModel through training steps (SGD between them) and records every
// observation with its (step, microbatch, phase), the losses, logits and
// gradients, the recompute log and the graph regions: the graph-phase tests
// compare graphed runs with eager ones through it.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "harness/backend/registry.h"
#include "harness/graphs/graph_runner.h"
#include "harness/model/gpt_model.h"
#include "harness/observation/execution_point.h"
#include "harness/recompute/checkpoint.h"
#include "tests/support/model_configs.h"

namespace parity::testing {

struct Note {
  std::int64_t step, microbatch;
  GraphPhase phase;
  std::string owner, name;
  SourceKind kind;
  at::Tensor value;  // a clone, taken in the callback (compaction)
  at::Tensor kept;   // the very object the site held (what a careless consumer keeps)
  bool all_nan;
};

struct StepResult {
  std::vector<double> losses;
  std::vector<at::Tensor> logits;
  std::map<std::string, at::Tensor> grads;
  // Each layer's input gradient per microbatch, read after every backward of
  // the step (GPTModel::layer_input_gradient_norms).
  std::vector<std::pair<std::string, double>> input_grad_norms;
};

struct GraphRun {
  std::vector<Note> notes;
  std::vector<StepResult> steps;
  std::vector<RecomputeEvent> log;
  std::vector<GraphRegion> regions;  // copies, after the run
};

inline ModelConfig graph_config() {
  ModelConfig c = testing::small_config<ModelConfig>();
  c.dtype = ModelDType::fp64;
  c.dropout = 0.1;
  c.seed = 21;
  c.init_std = 0.2;
  c.graph_warmup = 2;
  return c;
}

inline bool inside_site(SourceKind k) { return is_parity_probe(k); }

// `steps` training steps of `microbatches` microbatches with an SGD update in
// between. interleaved: all forwards, then all backwards (the static buffers
// are overwritten before the earlier microbatch's backward).
inline GraphRun drive(const ModelConfig& c, int steps, int microbatches, bool interleaved = false) {
  GraphRun run;
  auto backend = make_backend("reference");
  GPTModel model(c, *backend, ParallelContext::single());
  const at::Tensor pos = model.local_positions();
  auto scope = capture_tensor_observations(
      [&](const ObservationOwner& o, std::string_view n, SourceKind k, const at::Tensor& t,
          OptionalDim, OptionalDim, OptionalDim) {
        const ExecutionPoint& ep = current_execution_point();
        at::Tensor v = t.detach().clone();
        run.notes.push_back(Note{ep.step, ep.microbatch, ep.phase, o.canonical_name(),
                                 std::string(n), k, v, t, bool(v.isnan().all().item<bool>())});
      },
      KindSet::all());
  RecomputeLogScope log(&run.log);
  for (int step = 0; step < steps; ++step) {
    for (Parameter& p : model.parameters()) p.value.mutable_grad() = at::Tensor();
    StepResult result;
    auto body = [&] {
      result = StepResult{};
      std::vector<at::Tensor> losses;
      for (int mb = 0; mb < microbatches; ++mb) {
        // Keep the phase: under full-iteration graphs the runner set it around body.
        ExecutionPointScope point(ExecutionPoint{step, mb, current_execution_point().phase});
        MicrobatchData d = microbatch_data(c.seed, mb, c.seq, c.micro_batch, c.vocab);
        at::Tensor logits = model.forward(d.tokens, pos);
        at::Tensor loss = model.loss(logits, d.labels);
        result.logits.push_back(logits.detach().clone());
        result.losses.push_back(loss.item<double>());
        if (interleaved) {
          losses.push_back(loss);
        } else {
          loss.backward();
        }
      }
      for (int mb = 0; mb < static_cast<int>(losses.size()); ++mb) {
        ExecutionPointScope point(ExecutionPoint{step, mb, current_execution_point().phase});
        losses[mb].backward();
      }
    };
    // The body records its results on the host (this test runs on the
    // reference, whose replay re-runs host code): no inputs, no outputs.
    model.run_iteration(
        [&](const std::vector<at::Tensor>&) {
          body();
          return std::vector<at::Tensor>{};
        },
        {});
    result.input_grad_norms = model.layer_input_gradient_norms();
    model.finalize_grads();
    for (Parameter& p : model.parameters()) result.grads[p.name] = p.value.grad().clone();
    {
      at::NoGradGuard no_grad;
      for (Parameter& p : model.parameters()) p.value.sub_(p.value.grad() * 0.5);
    }
    run.steps.push_back(std::move(result));
    // Per-layer: warmup + capture after step 0, called between the step's
    // microbatches as the training step does.
    ExecutionPointScope point(ExecutionPoint{step, -1, GraphPhase::eager});
    model.end_step();
  }
  if (auto* phased = dynamic_cast<PhasedGraphRunner*>(&model.graph_runner()))
    run.regions = phased->regions();
  return run;
}

inline std::vector<const Note*> select(const GraphRun& r, std::int64_t step, std::int64_t mb) {
  std::vector<const Note*> out;
  for (const Note& n : r.notes) {
    if (n.step == step && n.microbatch == mb) out.push_back(&n);
  }
  return out;
}

inline double rel_err(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>() / std::max(1e-300, b.abs().max().item<double>());
}

// Bit for bit (tol == 0), or within `tol` relative where the gradient
// accumulation order legitimately differs (contract.md recompute_invariance).
inline void expect_same_results(const GraphRun& graphs, const GraphRun& eager, double tol = 0) {
  ASSERT_EQ(graphs.steps.size(), eager.steps.size());
  auto same = [tol](const at::Tensor& a, const at::Tensor& b) {
    return tol == 0 ? at::equal(a, b) : rel_err(a, b) <= tol;
  };
  for (size_t s = 0; s < eager.steps.size(); ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    for (size_t m = 0; m < eager.steps[s].logits.size(); ++m) {
      if (tol == 0) {
        EXPECT_EQ(graphs.steps[s].losses[m], eager.steps[s].losses[m]);
      } else {
        EXPECT_NEAR(graphs.steps[s].losses[m], eager.steps[s].losses[m],
                    tol * std::abs(eager.steps[s].losses[m]));
      }
      EXPECT_TRUE(same(graphs.steps[s].logits[m], eager.steps[s].logits[m])) << "mb " << m;
    }
    for (const auto& [name, g] : eager.steps[s].grads) {
      EXPECT_TRUE(same(graphs.steps[s].grads.at(name), g))
          << name << " rel " << rel_err(graphs.steps[s].grads.at(name), g);
    }
    ASSERT_EQ(graphs.steps[s].input_grad_norms.size(), eager.steps[s].input_grad_norms.size());
    for (std::size_t i = 0; i < eager.steps[s].input_grad_norms.size(); ++i) {
      const auto& [label, want] = eager.steps[s].input_grad_norms[i];
      EXPECT_EQ(graphs.steps[s].input_grad_norms[i].first, label);
      EXPECT_NEAR(graphs.steps[s].input_grad_norms[i].second, want, tol * std::abs(want))
          << label << " (the gradient at the layer's input, read at the end of the step)";
    }
  }
}

}  // namespace parity::testing
