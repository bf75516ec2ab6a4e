#pragma once
// rapidcheck generators of whole parity check scenarios, valid by
// construction (validate_check_scenario accepts every one). Small pieces,
// composed in gen_scenario(): layout, model shape, graphs, recompute, metrics,
// launch. Every choice lists its simplest value first, so rapidcheck shrinks a
// counterexample toward tp = cp = dp = 1, 1 layer, fp32, no recompute, no
// graphs, 1 step, threads. Shapes are tiny (hidden 8-32, seq 4-32, vocab
// 8-64): a check costs about a second. docs/property-suite.md.
#include <iosfwd>
#include <string>
#include <vector>

#include <rapidcheck.h>
#include <nlohmann/json.hpp>

#include "harness/config/run_config.h"

namespace parity {

// rapidcheck prints counterexamples through this (ADL): the scenario as the
// JSON of a scenario file, one line, ready for `parity repro`.
void showValue(const RunConfig& config, std::ostream& os);

}  // namespace parity

namespace parity::scenarios {

// The pieces. Each sets its fields of `c` (and reads those set before it, in
// this order: layout, model shape, graphs, recompute, metrics, launch); call
// them only inside rc::gen::exec or a property (they use operator*).
void pick_layout(RunConfig& c);       // tp, cp, dp (world <= 16), sp
void pick_model_shape(RunConfig& c);  // heads, hidden, ffn, vocab, seq, layers, batches, dtype, ...
// MoE layers on about a quarter of the scenarios (every one when `always`):
// experts, top-k, score, capacity, aux loss, expert bias, shared expert,
// forced routing, padding, ep 2 where cp x dp allows. Never with tp > 1
// without sp (Megatron's rule).
void pick_moe(RunConfig& c, bool always);
// graphs, graph-warmup, graph-scope, steps (a replay step when graphed)
void pick_graphs(RunConfig& c);
void pick_recompute(RunConfig& c);   // every kind; full recompute never with per-layer graphs
void pick_metrics(RunConfig& c);     // a non-empty subset, weighted to residual and logit metrics
void pick_launch(RunConfig& c);      // threads; processes rarely, world <= 2 only
void pick_evaluation(RunConfig& c);  // eval-every 0 or 1 (drawn last)
// MoE z-loss and per-layer logging (MoE scenarios only); drawn last.
void pick_moe_logging(RunConfig& c);
// The optimizer's norm metrics and the distributed optimizer (dp > 1); drawn last.
void pick_optimizer(RunConfig& c);

// Pipeline stages on a scenario drawn by the pieces above: pp 2 (4 where the
// world allows), sometimes vpp 2 (microbatches a multiple of pp), an uneven
// first stage or a layout string; the world kept <= 16 by halving dp, cp, tp;
// MTP depths (with rope, no graphs) a quarter of the time; tied embeddings as
// drawn. What the pipeline does not run yet is turned off (the evaluation
// forward), and MoE, which pick_pipeline_moe draws last.
void pick_pipeline(RunConfig& c);
// MoE layers on about a third of the pipelined scenarios (pick_moe), on
// every layer, every second one or the last one only (stages without MoE
// layers), with router metrics, the tracker now and then, and checked
// collectives.
void pick_pipeline_moe(RunConfig& c);

// Idle ranks: ranks that hold nothing for a reduction their group runs, where
// a collective guarded by the data makes the group's ranks disagree (fault
// collective-skipped-when-zero). Each returns false, leaving `c` alone, where
// the scenario cannot have them.
// An EP rank that receives no token: ep 2 (cp x dp and the experts even),
// biased forced routing (every token prefers experts 0..k-1) and k <= E / 2,
// so the experts that receive tokens all live on EP rank 0.
bool make_idle_ep_rank(RunConfig& c);
// Experts no token reaches: biased forced routing with k < E.
bool make_idle_experts(RunConfig& c);
// Ranks whose tokens are all padding: the padding leaves only the first of the
// sequence's 2*cp x (tp under SP) chunks valid, so every CP rank but the first,
// and under SP every TP rank but the first, holds padding only. Needs cp > 1
// or SP with tp > 1. (DP ranks cannot be idle: the padding mask is the same
// trailing positions of every sequence.)
bool make_idle_sequence_ranks(RunConfig& c);
// On half the MoE scenarios (drawn last): idle experts or an idle EP rank with
// the gradient norm (its EP sum), and/or idle sequence ranks with the MoE
// tracker (its tp, cp and dp sums) and a router metric.
void pick_idle_ranks(RunConfig& c);

// A resume on a third of the scenarios with two steps or more (drawn last):
// --resume-at in [1, steps), --resume-layout the scenario's or one with an
// axis changed (tp, cp, dp, pp; a valid scenario only), Adam now and then
// (fp64 only).
void pick_resume(RunConfig& c);

// Packed sequences on a sixth of the scenarios without MTP, pipeline stages or
// a padding fraction (drawn after everything else): one to three documents of
// any length that fit in seq once padded to 2 x cp, micro-batch 1.
void pick_packing(RunConfig& c);

// --check-collectives on every MoE scenario (no draw).
void pick_collective_checks(RunConfig& c);

// A whole scenario: the pieces above, in order.
rc::Gen<RunConfig> gen_scenario();
// Every scenario pipelined (pick_pipeline after the layout and the model
// shape, then recompute, metrics, launch and the optimizer's norms): the
// pipeline faults' hunt and the pipeline property.
rc::Gen<RunConfig> gen_pipeline_scenario();
// Every scenario with MoE layers (the router faults' hunt; tp > 1 turns sp on).
rc::Gen<RunConfig> gen_moe_scenario();
// The router metrics the generators add to MoE scenarios: of router logits and
// scores, and of the diagnostics (only where sequences are whole on a rank).
const std::vector<std::string>& router_metric_names();
const std::vector<std::string>& router_diagnostics_metric_names();

// The residual, attention-context, MLP-output and logit metrics (5 sources x
// 10 statistics): the ones the first-wave model produces.
const std::vector<std::string>& scenario_metric_names();

// The fields that differ from RunConfig's defaults, as JSON (the mutants
// table's compact scenario).
nlohmann::json differing_fields(const RunConfig& config);

}  // namespace parity::scenarios
