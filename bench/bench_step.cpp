// Wall time of one training step (forward + loss + backward of every
// microbatch, finalize_grads, SGD update) in threads mode, for world sizes 1, 2,
// 4, 8, 16, at fixed per-rank work (DP scaling: every rank runs the same
// microbatches) and at fixed global work (the same global batch split over the
// DP ranks), and with a TP x DP layout at fixed global work. Prints a Markdown
// table (docs/benchmarks.md, "Training step"). Not a timed test: a program.
//
//   parity_bench_step [--steps N] [--max-world W] [--global-microbatches G]
//   parity_bench_step --moe [--steps N]
//   parity_bench_step --mtp [--steps N]
//   parity_bench_step --pp [--steps N]
//   parity_bench_step --gqa [--steps N]
//
// --moe: 8 thread ranks (tp 2 with sp x dp 4), the dense model against MoE
// layers with 8 experts, top-2, without and with expert parallelism (ep 2):
// what the router, the dispatcher and the EP all-to-alls cost per step.
//
// --mtp: the same 8 thread ranks, the dense model against multi-token
// prediction (one depth; two depths sharing one layer, without and with full
// recompute) and the weight-gradient sites (--observe-wgrad: a hook per
// parameter and one notification per parameter per microbatch into a trace).
//
// --pp: pipeline stages P in {1, 2, 4} x model chunks per stage V in {1, 2}
// (1F1B, interleaved 1F1B) at fixed global work: 8 layers, 8 microbatches,
// tp 1 x dp 1 x pp P thread ranks; the schedule, its point-to-point messages
// and the stages' idle time (bubbles) against the same model on one rank.
// --gqa: 4 thread ranks (tp 2 with sp x cp 2), hidden 512 and 8 heads in 8
// (plain attention), 4, 2 and 1 query groups: the key/value projection and the
// CP key/value all-gather shrink with the groups.
//
// Each configuration is launched once (the "model" rank program over Gloo thread
// ranks) for N steps; a step's time is the slowest rank's wall time of that
// step; step 0 (first-touch allocations, Gloo warm-up) is dropped and the median
// of the rest is reported. The last column sums the rank threads' CPU time of
// a step (compute only: Gloo runs collectives on its own threads); it does not
// depend on how loaded the machine is, the wall times do.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/config/launch_mapping.h"
#include "harness/config/run_config.h"
#include "harness/driver/training_step.h"

namespace {

using parity::RunConfig;

RunConfig base_model() {
  RunConfig c;
  c.hidden = 64;
  c.heads = 8;
  c.ffn_hidden = 256;
  c.layers = 2;
  c.seq = 32;
  c.micro_batch = 2;
  c.vocab = 512;
  c.dtype = parity::ModelDType::fp32;
  c.timeout = 600;
  return c;
}

struct Measured {
  double median_ms = 0, min_ms = 0;
  double cpu_ms = 0;  // median over steps of the rank threads' CPU time, summed over ranks
};

Measured measure(const RunConfig& c) {
  parity::register_model_program();
  const parity::LaunchResult r = parity::launch(c, parity::kModelProgram);
  if (!r.ok()) {
    for (const std::string& l : r.failure->lines()) std::fprintf(stderr, "%s\n", l.c_str());
    std::exit(3);
  }
  std::vector<double> per_step, cpu;
  for (int s = 1; s < c.steps; ++s) {
    double slowest = 0, cpu_sum = 0;
    for (const nlohmann::json& rank : r.results) {
      slowest = std::max(slowest, rank["steps"][s]["seconds"].get<double>());
      cpu_sum += rank["steps"][s]["cpu_seconds"].get<double>();
    }
    per_step.push_back(slowest * 1e3);
    cpu.push_back(cpu_sum * 1e3);
  }
  std::sort(per_step.begin(), per_step.end());
  std::sort(cpu.begin(), cpu.end());
  return {per_step[per_step.size() / 2], per_step.front(), cpu[cpu.size() / 2]};
}

// The 8 thread ranks of --moe and --mtp (tp 2 with sp x dp 4), its line printed.
RunConfig eight_rank_model(int steps) {
  RunConfig base = base_model();
  base.tp = 2;
  base.sp = true;
  base.dp = 4;
  base.steps = steps;
  std::printf(
      "model: %d layers, hidden %d, heads %d, ffn %d, seq %d, micro-batch %d, vocab %d, "
      "fp32, tp 2 sp x dp 4 (8 thread ranks); %d steps per run, step 0 dropped\n\n",
      base.layers, base.hidden, base.heads, base.ffn_hidden, base.seq, base.micro_batch, base.vocab,
      steps);
  return base;
}

// measure(c), after printing any rule `c` breaks.
Measured measure_checked(const RunConfig& c) {
  for (const auto& v : parity::validate_run_config(c))
    std::fprintf(stderr, "%s\n", parity::format_for_cli(v).c_str());
  return measure(c);
}

void print_moe_table(int steps) {
  const RunConfig base = eight_rank_model(steps);
  std::printf(
      "| layers | experts | top-k | ep | step ms (median) | step ms (min) | "
      "rank-thread CPU ms per step (all ranks) |\n|---|---|---|---|---|---|---|\n");
  struct Case {
    const char* what;
    int experts, ep;
  };
  for (const Case& k : {Case{"dense MLP", 0, 1}, Case{"MoE", 8, 1}, Case{"MoE", 8, 2}}) {
    RunConfig c = base;
    c.moe_experts = k.experts;
    c.ep = k.ep;
    c.moe_ffn_hidden = k.experts ? base.ffn_hidden / 4 : 0;
    if (k.experts) c.moe_aux_loss = 0.01;
    const Measured m = measure_checked(c);
    std::printf("| %s | %d | %d | %d | %.1f | %.1f | %.1f |\n", k.what, k.experts,
                k.experts ? c.moe_topk : 0, k.ep, m.median_ms, m.min_ms, m.cpu_ms);
    std::fflush(stdout);
  }
}

void print_mtp_table(int steps) {
  const RunConfig base = eight_rank_model(steps);
  std::printf(
      "| MTP depths | repeated layer | recompute | weight-gradient sites | step ms (median) | "
      "step ms (min) | rank-thread CPU ms per step (all ranks) |\n|---|---|---|---|---|---|---|\n");
  struct Case {
    int depths;
    bool repeated;
    const char* recompute;
    bool wgrad;
  };
  for (const Case& k : {Case{0, false, "none", false}, Case{1, false, "none", false},
                        Case{2, true, "none", false}, Case{2, true, "full-uniform", false},
                        Case{0, false, "none", true}, Case{2, true, "full-uniform", true}}) {
    RunConfig c = base;
    c.mtp_layers = k.depths;
    c.mtp_repeated_layer = k.repeated;
    c.recompute = k.recompute;
    c.observe_wgrad = k.wgrad;
    // The sites notify only an observer: the trace records them (as parity check does).
    if (k.wgrad) c.trace = "(recorded in memory)";
    const Measured m = measure_checked(c);
    std::printf("| %d | %s | %s | %s | %.1f | %.1f | %.1f |\n", k.depths, k.repeated ? "yes" : "no",
                k.recompute, k.wgrad ? "on (traced)" : "off", m.median_ms, m.min_ms, m.cpu_ms);
    std::fflush(stdout);
  }
}

void print_pp_table(int steps) {
  RunConfig base = base_model();
  base.layers = 8;
  base.microbatches = 8;
  base.steps = steps;
  std::printf(
      "model: %d layers, hidden %d, heads %d, ffn %d, seq %d, micro-batch %d x %d microbatches, "
      "vocab %d, fp32, tp 1 x dp 1 x pp P thread ranks; %d steps per run, step 0 dropped\n\n",
      base.layers, base.hidden, base.heads, base.ffn_hidden, base.seq, base.micro_batch,
      base.microbatches, base.vocab, steps);
  std::printf(
      "| pp | vpp | schedule | step ms (median) | step ms (min) | "
      "rank-thread CPU ms per step (all ranks) |\n|---|---|---|---|---|---|\n");
  for (int pp : {1, 2, 4})
    for (int vpp : {1, 2}) {
      if (pp == 1 && vpp > 1) continue;  // interleaving needs stages
      RunConfig c = base;
      c.pp = pp;
      c.vpp = vpp;
      const Measured m = measure_checked(c);
      std::printf("| %d | %d | %s | %.1f | %.1f | %.1f |\n", pp, vpp,
                  pp == 1    ? "none"
                  : vpp == 1 ? "1F1B"
                             : "interleaved 1F1B",
                  m.median_ms, m.min_ms, m.cpu_ms);
      std::fflush(stdout);
    }
}

void print_gqa_table(int steps) {
  RunConfig base = base_model();
  base.hidden = 512;
  base.ffn_hidden = 512;
  base.seq = 128;
  base.tp = 2;
  base.sp = true;
  base.cp = 2;
  base.steps = steps;
  std::printf(
      "model: %d layers, hidden %d, heads %d, ffn %d, seq %d, micro-batch %d, vocab %d, "
      "fp32, tp 2 sp x cp 2 (4 thread ranks); %d steps per run, step 0 dropped\n\n",
      base.layers, base.hidden, base.heads, base.ffn_hidden, base.seq, base.micro_batch, base.vocab,
      steps);
  std::printf(
      "| query groups | step ms (median) | step ms (min) | rank-thread CPU ms per step (all "
      "ranks) |\n|---|---|---|---|\n");
  for (int groups : {8, 4, 2, 1}) {
    RunConfig c = base;
    c.num_query_groups = groups;
    const Measured m = measure_checked(c);
    std::printf("| %d | %.1f | %.1f | %.1f |\n", groups, m.median_ms, m.min_ms, m.cpu_ms);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 6, max_world = 16, global_microbatches = 16;
  if (argc >= 2 && !std::strcmp(argv[1], "--moe")) {
    if (argc == 4 && !std::strcmp(argv[2], "--steps")) steps = std::max(2, std::atoi(argv[3]));
    print_moe_table(steps);
    return 0;
  }
  if (argc >= 2 && !std::strcmp(argv[1], "--pp")) {
    if (argc == 4 && !std::strcmp(argv[2], "--steps")) steps = std::max(2, std::atoi(argv[3]));
    print_pp_table(steps);
    return 0;
  }
  if (argc >= 2 && !std::strcmp(argv[1], "--gqa")) {
    if (argc == 4 && !std::strcmp(argv[2], "--steps")) steps = std::max(2, std::atoi(argv[3]));
    print_gqa_table(steps);
    return 0;
  }
  if (argc >= 2 && !std::strcmp(argv[1], "--mtp")) {
    if (argc == 4 && !std::strcmp(argv[2], "--steps")) steps = std::max(2, std::atoi(argv[3]));
    print_mtp_table(steps);
    return 0;
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--steps"))
      steps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--max-world"))
      max_world = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--global-microbatches"))
      global_microbatches = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: %s [--steps N>=2] [--max-world W] [--global-microbatches G]\n",
                   argv[0]);
      return 2;
    }
  }
  if (steps < 2) steps = 2;
  const RunConfig model = base_model();
  std::printf(
      "model: %d layers, hidden %d, heads %d, ffn %d, seq %d, micro-batch %d, vocab %d, "
      "fp32; %d steps per run, step 0 dropped; ms = slowest rank's step wall time\n\n",
      model.layers, model.hidden, model.heads, model.ffn_hidden, model.seq, model.micro_batch,
      model.vocab, steps);
  std::printf(
      "| world | scaling | layout | microbatches per rank | global batch (sequences) | "
      "step ms (median) | step ms (min) | tokens/s | rank-thread CPU ms per step (all ranks) |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  struct Case {
    const char* scaling;
    int tp, dp, microbatches;
  };
  for (int world = 1; world <= max_world; world *= 2) {
    std::vector<Case> cases = {{"fixed per-rank work", 1, world, 2}};
    if (global_microbatches % world == 0)
      cases.push_back({"fixed global work", 1, world, global_microbatches / world});
    const int tp = std::min(world, 4);
    if (world > 1 && global_microbatches % (world / tp) == 0)
      cases.push_back({"fixed global work", tp, world / tp, global_microbatches / (world / tp)});
    for (const Case& k : cases) {
      RunConfig c = model;
      c.tp = k.tp;
      c.dp = k.dp;
      c.sp = k.tp > 1;
      c.microbatches = k.microbatches;
      c.steps = steps;
      if (!parity::validate_run_config(c).empty()) continue;
      const Measured m = measure(c);
      const long long sequences = static_cast<long long>(c.micro_batch) * c.microbatches * c.dp;
      const double tokens_per_s = double(sequences) * c.seq / (m.median_ms * 1e-3);
      std::printf("| %d | %s | tp %d%s x dp %d | %d | %lld | %.1f | %.1f | %.0f | %.1f |\n", world,
                  k.scaling, c.tp, c.sp ? " sp" : "", c.dp, c.microbatches, sequences, m.median_ms,
                  m.min_ms, tokens_per_s, m.cpu_ms);
      std::fflush(stdout);
    }
  }
  return 0;
}
