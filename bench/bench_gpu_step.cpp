// One training step of a mid-size model on one GPU with the CUDA backend:
// eager vs per-layer graphs vs full-iteration graphs, each with no metric and
// with every metric active (docs/benchmarks.md, "CUDA backend step"). A
// program, not a timed test; ci/gpu-validate runs it on a GPU machine.
//
//   parity_bench_gpu_step [--steps N] [--hidden H] [--layers L] [--seq S]
//                         [--micro-batch B] [--reference-steps R]
//
// Defaults: hidden 1024, 8 layers, seq 2048, micro batch 2, bf16, one rank,
// 6 steps (step 0 and, for graphs, the capture step dropped; median of the
// rest). A step's time is its wall time on the rank thread, which reads the
// loss and gradient norms back at the step's end (so the GPU work is done).
// --reference-steps R > 0 adds the CPU reference backend's time for the same
// step (R >= 2 steps, step 0 dropped; slow: minutes on a CPU).
// Without a GPU it exits 2 saying so.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/backend/registry.h"
#include "harness/config/launch_mapping.h"
#include "harness/config/run_config.h"
#include "harness/driver/training_step.h"
#include "harness/metrics/metric_names.h"

namespace {

using parity::RunConfig;

struct Measured {
  double median_ms = 0, min_ms = 0;
  bool ran = false;
  std::string why;  // when not ran
};

Measured measure(const RunConfig& c, int skip) {
  Measured m;
  const std::vector<parity::ConfigViolation> bad = parity::validate_run_config(c);
  if (!bad.empty()) {
    m.why = parity::format_for_cli(bad.front());
    return m;
  }
  const parity::LaunchResult r = parity::launch(c, parity::kModelProgram);
  if (!r.ok()) {
    for (const std::string& l : r.failure->lines()) std::fprintf(stderr, "%s\n", l.c_str());
    std::exit(3);
  }
  std::vector<double> per_step;
  for (int s = skip; s < c.steps; ++s)
    per_step.push_back(r.results[0]["steps"][s]["seconds"].get<double>() * 1e3);
  std::sort(per_step.begin(), per_step.end());
  m.median_ms = per_step[per_step.size() / 2];
  m.min_ms = per_step.front();
  m.ran = true;
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  RunConfig model;
  model.hidden = 1024;
  model.heads = 16;
  model.ffn_hidden = 4096;
  model.layers = 8;
  model.seq = 2048;
  model.micro_batch = 2;
  model.microbatches = 1;
  model.vocab = 32768;
  model.dtype = parity::ModelDType::bf16;
  model.timeout = 1200;
  model.steps = 6;
  int reference_steps = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (a == "--steps")
      model.steps = std::max(v, 4);
    else if (a == "--hidden")
      model.hidden = v;
    else if (a == "--layers")
      model.layers = v;
    else if (a == "--seq")
      model.seq = v;
    else if (a == "--micro-batch")
      model.micro_batch = v;
    else if (a == "--reference-steps")
      reference_steps = v;
    else {
      std::fprintf(stderr,
                   "usage: %s [--steps N>=4] [--hidden H] [--layers L] [--seq S] "
                   "[--micro-batch B] [--reference-steps R]\n",
                   argv[0]);
      return 2;
    }
  }
  parity::register_model_program();
  model.backend = "cuda";
  if (const auto bad = parity::validate_run_config(model); !bad.empty()) {
    std::fprintf(stderr, "parity_bench_gpu_step: %s\n",
                 parity::format_for_cli(bad.front()).c_str());
    return 2;
  }
  const std::vector<std::string> every_metric = parity::known_metric_names();
  std::printf(
      "model: %lld layers, hidden %lld, heads %lld, ffn %lld, seq %lld, micro-batch %lld, "
      "vocab %lld, bf16, one rank; %d steps per run, median of the steps after the first "
      "two (warmup, capture)\n\n",
      (long long)model.layers, (long long)model.hidden, (long long)model.heads,
      (long long)model.ffn_hidden, (long long)model.seq, (long long)model.micro_batch,
      (long long)model.vocab, (int)model.steps);
  std::printf(
      "| backend | graphs | metrics | step ms (median) | step ms (min) | tokens/s | "
      "metrics cost |\n|---|---|---|---|---|---|---|\n");
  const std::pair<parity::GraphMode, const char*> modes[] = {
      {parity::GraphMode::none, "eager"},
      {parity::GraphMode::per_layer, "per-layer"},
      {parity::GraphMode::full_iteration, "full-iteration"}};
  for (const auto& [mode, label] : modes) {
    double without = 0;
    for (bool metrics : {false, true}) {
      RunConfig c = model;
      c.graphs = mode;
      if (metrics) c.metrics = every_metric;
      const Measured m = measure(c, /*skip=*/2);
      if (!m.ran) {
        std::printf("| cuda | %s | %s | n/a: %s | | | |\n", label, metrics ? "all" : "none",
                    m.why.c_str());
        continue;
      }
      const double tokens = double(c.seq) * double(c.micro_batch) * double(c.microbatches);
      std::string cost;
      if (!metrics)
        without = m.median_ms;
      else if (without > 0)
        cost = std::to_string((m.median_ms / without - 1.0) * 100.0) + " %";
      std::printf("| cuda | %s | %s | %.2f | %.2f | %.0f | %s |\n", label, metrics ? "all" : "none",
                  m.median_ms, m.min_ms, tokens / (m.median_ms * 1e-3), cost.c_str());
      std::fflush(stdout);
    }
  }
  if (reference_steps >= 2) {
    RunConfig c = model;
    c.backend = "reference";
    c.steps = reference_steps;
    const Measured m = measure(c, /*skip=*/1);
    std::printf("| reference (CPU, one rank thread) | eager | none | %.0f | %.0f | %.0f | |\n",
                m.median_ms, m.min_ms,
                double(c.seq) * double(c.micro_batch) / (m.median_ms * 1e-3));
  }
  return 0;
}
