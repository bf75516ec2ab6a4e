#include "harness/driver/training_step.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <memory>
#include <optional>
#include <tuple>

#include <nlohmann/json.hpp>

#include "harness/backend/registry.h"
#include "harness/backend/stable_hash.h"
#include "harness/config/model_mapping.h"
#include "harness/driver/pipeline_step.h"
#include "harness/driver/run_checkpoint.h"
#include "harness/driver/run_dump.h"
#include "harness/faults/code_path_faults.h"
#include "harness/metrics/collector.h"
#include "harness/metrics/executor.h"
#include "harness/metrics/metric_names.h"
#include "harness/model/flat_shard_layout.h"
#include "harness/model/gpt_model.h"
#include "harness/model/loaded_batch.h"
#include "harness/model/loaded_weights.h"
#include "harness/model/multi_token_prediction.h"
#include "harness/model/optimizer.h"
#include "harness/model/parameter_norms.h"
#include "harness/observation/execution_point.h"
#include "harness/parallel/point_to_point.h"
#include "harness/parallel/rank_status.h"
#include "harness/runtime/launcher.h"
#include "harness/trace/trace_recorder.h"

PARITY_USES_FAULT(cp_loss_scale);
PARITY_USES_FAULT(eval_loss_cp_unscaled);

namespace parity {
namespace {

double thread_cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

double sum_over(Communicator* c, double v) {
  if (c == nullptr || c->size() == 1) return v;
  return c->all_reduce(at::tensor({v}, at::kDouble), ReduceOp::sum).item<double>();
}

// The tokens of the global batch of `microbatches` microbatches per DP rank:
// what each rank's token losses are divided by, so their sum over CP and DP is
// the batch mean. `cp_rank_only` is the CP bug class of the faults
// cp-loss-scale and eval-loss-cp-unscaled: the CP rank's own tokens instead.
double global_tokens(const GPTModel& model, std::int64_t microbatches, bool cp_rank_only) {
  const ModelConfig& c = model.config();
  const ParallelContext& par = model.parallel();
  // Packed sequences count the documents' tokens, not their padding.
  const double tokens = double(c.tokens_per_sequence());
  const double sequence = cp_rank_only ? tokens / double(par.cp_size()) : tokens;
  return sequence * double(c.micro_batch) * double(microbatches) * double(par.dp_size());
}

// The evaluation forward after `step` (TrainingOptions::eval_every): no grad,
// training off (no dropout, no aux loss, layers eager), observations
// suspended (an evaluation is no training step's observation), seeded eval
// microbatches of its own. The mean token loss over the eval batch.
double evaluate(GPTModel& model, const TrainingOptions& o, std::int64_t step) {
  const ModelConfig& c = model.config();
  const ParallelContext& par = model.parallel();
  // Fault eval-loss-cp-unscaled (transformers PR 48167): the evaluation path
  // normalizes by the CP rank's own tokens, as if the sequence were whole.
  const double tokens =
      global_tokens(model, o.microbatches, fault_active(fault_eval_loss_cp_unscaled));
  const std::int64_t base = (std::int64_t{1} << 30) + step * o.microbatches * par.dp_size();
  at::NoGradGuard no_grad;
  auto quiet = suspend_tensor_observations();
  ExecutionPointScope point(ExecutionPoint{step, -1, GraphPhase::eager});
  model.set_training(false);
  const at::Tensor positions = model.local_positions();
  double share = 0;
  if (par.pp_size() > 1) {
    // The stages run Megatron's forward_only schedule; the last holds the losses.
    PipelineStepInputs pin;
    pin.step = step;
    pin.positions = positions;
    pin.batch_tokens = tokens;
    pin.evaluation = true;
    for (std::int64_t m = 0; m < o.microbatches; ++m) {
      const MicrobatchData data =
          model.microbatch(base + model.global_microbatch(m, o.microbatches));
      pin.tokens.push_back(model.slice_sequence(data.tokens));
      pin.labels.push_back(model.slice_sequence(data.labels));
    }
    const PipelineStepOutputs out = run_pipeline_microbatches(
        model, pin, stage_schedule(model, o.microbatches, /*forward_only=*/true));
    for (const at::Tensor& token_losses : out.token_losses)
      share += token_losses.sum().item<double>() / tokens;
  } else {
    for (std::int64_t m = 0; m < o.microbatches; ++m) {
      step_heartbeat(StepPass::forward);
      const MicrobatchData data =
          model.microbatch(base + model.global_microbatch(m, o.microbatches));
      const at::Tensor logits =
          model.forward(model.slice_sequence(data.tokens), positions, c.runtime_gather_output);
      share += model.token_losses(logits, model.slice_sequence(data.labels)).sum().item<double>() /
               tokens;
    }
  }
  model.set_training(true);
  // Only the stage with the loss holds a share; every rank reports the sum.
  return sum_over(par.pp, sum_over(par.dp, sum_over(par.cp, share)));
}

bool wants(const TrainingOptions& o, const char* metric) {
  return std::find(o.parameter_metrics.begin(), o.parameter_metrics.end(), metric) !=
         o.parameter_metrics.end();
}

// One step; `recorder` and `schedule` (this pipeline stage's; null without
// PP) may be null.
StepResult run_step(GPTModel& model, const TrainingOptions& o, std::int64_t step,
                    const TraceRecorder* recorder, Optimizer& optimizer,
                    const std::vector<ScheduleStep>* schedule) {
  const FlatShardLayout* layout = optimizer.layout();
  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = thread_cpu_seconds();
  const std::int64_t before = recorder ? recorder->size() : 0;
  const ModelConfig& c = model.config();
  const ParallelContext& par = model.parallel();
  // Fault cp-loss-scale (Megatron-LM #673, #906): the CP rank's own tokens.
  const double batch_tokens =
      global_tokens(model, o.microbatches, fault_active(fault_cp_loss_scale));
  const std::int64_t step_base = step * o.microbatches * par.dp_size();
  const at::Tensor positions = model.local_positions();
  // Each microbatch's MoE aux loss is its share of the step's mean, as each
  // token's LM loss is (batch_tokens below).
  model.runtime().aux_loss_scale = 1.0 / (double(o.microbatches) * double(par.dp_size()));

  StepResult r;
  r.step = step;
  for (Parameter& p : model.parameters()) p.value.mutable_grad() = at::Tensor();
  model.begin_step();
  // The iteration's batch is computed on the host first and handed to the
  // graph runner as the iteration's inputs (a captured iteration reads it from
  // static buffers that each replay refills). The body returns each
  // microbatch's logits, loss and per-token losses; their digests and values
  // are read on the host after the iteration (a captured body must not
  // synchronize with the host). Inputs: positions, then tokens and labels per
  // microbatch; outputs: logits, loss, token losses per microbatch.
  std::vector<at::Tensor> inputs{positions};
  // MTP inputs stay outside the iteration's inputs: MTP needs graphs none.
  std::vector<MtpBatch> mtp;
  for (std::int64_t m = 0; m < o.microbatches; ++m) {
    const std::int64_t index = step_base + model.global_microbatch(m, o.microbatches);
    const MicrobatchData data = o.batch ? model.from_single_rank_layout(o.batch->microbatch(index))
                                        : model.microbatch(index);
    at::Tensor tokens = data.tokens;
    const std::int64_t padding = c.moe.padding_tokens(c.seq);
    if (o.padding_token_shift != 0 && padding > 0) {
      tokens = tokens.clone();
      tokens.narrow(0, c.seq - padding, padding).add_(o.padding_token_shift).remainder_(c.vocab);
    }
    inputs.push_back(model.slice_sequence(tokens));
    inputs.push_back(model.slice_sequence(data.labels));
    if (c.mtp_layers > 0) mtp.push_back(model.mtp_batch(tokens, data.labels));
  }
  auto body = [&](const std::vector<at::Tensor>& in) {
    std::vector<at::Tensor> out;
    for (std::int64_t m = 0; m < o.microbatches; ++m) {
      // Keep the phase: under full-iteration graphs the runner set it around the body.
      ExecutionPointScope point(ExecutionPoint{step, m, current_execution_point().phase});
      step_heartbeat(StepPass::forward);
      const at::Tensor& tokens = in[static_cast<std::size_t>(1 + 2 * m)];
      const at::Tensor& labels = in[static_cast<std::size_t>(2 + 2 * m)];
      const at::Tensor logits =
          model.forward(tokens, in[0], model.config().runtime_gather_output,
                        mtp.empty() ? nullptr : &mtp[static_cast<std::size_t>(m)]);
      const at::Tensor token_losses = model.token_losses(logits, labels);
      const at::Tensor loss = token_losses.sum() / batch_tokens;
      model.backward_starts();
      step_heartbeat(StepPass::backward);
      loss.backward();
      step_heartbeat(StepPass::backward);
      model.backward_finished();
      out.push_back(logits.detach());
      out.push_back(loss.detach());
      out.push_back(token_losses.detach());
    }
    return out;
  };
  std::vector<at::Tensor> logits_of, loss_of, token_losses_of;
  if (schedule) {
    // A pipeline stage runs its schedule's forwards and backwards (as the
    // iteration a full-iteration graph captures); the stage with the loss
    // returns the microbatches' outputs, the others nothing.
    auto pipeline_body = [&](const std::vector<at::Tensor>& in) {
      PipelineStepInputs pin;
      pin.step = step;
      pin.positions = in[0];
      pin.batch_tokens = batch_tokens;
      if (!mtp.empty()) pin.mtp = &mtp;
      for (std::int64_t m = 0; m < o.microbatches; ++m) {
        pin.tokens.push_back(in[static_cast<std::size_t>(1 + 2 * m)]);
        pin.labels.push_back(in[static_cast<std::size_t>(2 + 2 * m)]);
      }
      PipelineStepOutputs piped = run_pipeline_microbatches(model, pin, *schedule);
      std::vector<at::Tensor> out;
      for (std::size_t m = 0; m < piped.logits.size(); ++m)
        out.insert(out.end(), {piped.logits[m], piped.loss[m], piped.token_losses[m]});
      return out;
    };
    ExecutionPointScope point(ExecutionPoint{step, -1, GraphPhase::eager});
    const std::vector<at::Tensor> out = model.run_iteration(pipeline_body, inputs);
    for (std::size_t i = 0; i + 2 < out.size(); i += 3) {
      logits_of.push_back(out[i]);
      loss_of.push_back(out[i + 1]);
      token_losses_of.push_back(out[i + 2]);
    }
  } else {
    ExecutionPointScope point(ExecutionPoint{step, -1, GraphPhase::eager});
    const std::vector<at::Tensor> out = model.run_iteration(body, inputs);
    for (std::size_t i = 0; i + 2 < out.size(); i += 3) {
      logits_of.push_back(out[i]);
      loss_of.push_back(out[i + 1]);
      token_losses_of.push_back(out[i + 2]);
    }
  }
  double loss_share = 0;
  r.logits_digest = kFnvOffset;
  {
    at::NoGradGuard no_grad;
    for (std::size_t m = 0; m < logits_of.size(); ++m) {
      r.logits_digest = fnv1a64(tensor_digest(logits_of[m]), r.logits_digest);
      loss_share += loss_of[m].item<double>();
    }
  }

  ExecutionPointScope point(ExecutionPoint{step, -1, GraphPhase::eager});
  r.input_grad_norms = model.layer_input_gradient_norms();
  if (o.after_backward) o.after_backward(step, logits_of, token_losses_of);
  model.finalize_grads();
  if (o.after_finalize_grads) o.after_finalize_grads(step);
  // Megatron logs the MoE and MTP trackers after the step's forward and backward passes.
  for (LoggedStatistic& s : model.logged_moe_statistics(o.microbatches))
    r.metrics.push_back({std::move(s.metric), std::move(s.label), s.value});
  for (LoggedStatistic& s : model.logged_mtp_losses(o.microbatches))
    r.metrics.push_back({std::move(s.metric), std::move(s.label), s.value});
  // Only the stage with the loss holds a share; every rank reports the sum.
  r.loss = sum_over(par.pp, sum_over(par.dp, sum_over(par.cp, loss_share)));
  at::NoGradGuard no_grad;
  r.grad_digest = kFnvOffset;
  for (Parameter& p : model.parameters()) {
    at::Tensor g = p.value.grad();
    const std::uint64_t d = tensor_digest(g);
    r.grad_digests.emplace_back(p.name, d);
    r.grad_digest = fnv1a64(d, r.grad_digest);
    r.grad_norms.emplace_back(p.name, g.defined() ? g.to(at::kDouble).norm().item<double>() : 0.0);
  }
  // The optimizer's norms (Megatron computes the gradient norm for clipping
  // before the update and logs the parameter norm after it).
  if (wants(o, "global-wgrad-l2"))
    r.metrics.push_back(
        {"global-wgrad-l2", "global", parameter_norms(model, NormOf::gradients, layout).global});
  optimizer.step(model.parameters(), par.dp);
  for (const Parameter& p : model.parameters())
    if (p.shared_embedding)
      r.shared_value_digests.emplace_back(p.name, tensor_digest(p.value.detach()));
  if (wants(o, "global-param-l2") || wants(o, "layer-param-l2")) {
    const ParameterNorms n = parameter_norms(model, NormOf::values, layout);
    if (wants(o, "global-param-l2")) r.metrics.push_back({"global-param-l2", "global", n.global});
    if (wants(o, "layer-param-l2")) {
      for (const auto& [label, value] : n.per_layer)
        r.metrics.push_back({"layer-param-l2", label, value});
      r.metrics.push_back({"layer-param-l2", "global", n.layers});
    }
  }
  model.end_step();  // per-layer graphs: warmup + capture after the recorded step
  if (o.eval_every > 0 && (step + 1) % o.eval_every == 0) r.eval_loss = evaluate(model, o, step);
  r.observations = (recorder ? recorder->size() : 0) - before;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.cpu_seconds = thread_cpu_seconds() - cpu_start;
  return r;
}

nlohmann::json step_json(const StepResult& s) {
  nlohmann::json grads = nlohmann::json::object();
  for (const auto& [name, d] : s.grad_digests) grads[name] = digest_hex(d);
  nlohmann::json norms = nlohmann::json::object();
  for (const auto& [name, n] : s.grad_norms) norms[name] = n;
  nlohmann::json input_grads = nlohmann::json::object();
  for (const auto& [label, n] : s.input_grad_norms) input_grads[label] = n;
  nlohmann::json metrics = nlohmann::json::array();
  for (const StepMetric& m : s.metrics)
    metrics.push_back({{"metric", m.metric}, {"label", m.label}, {"value", m.value}});
  nlohmann::json j = {{"step", s.step},
                      {"loss", s.loss},
                      {"eval_loss", std::isnan(s.eval_loss) ? nlohmann::json(nullptr)
                                                            : nlohmann::json(s.eval_loss)},
                      {"logits_digest", digest_hex(s.logits_digest)},
                      {"grad_digest", digest_hex(s.grad_digest)},
                      {"grads", grads},
                      {"grad_norms", norms},
                      {"input_grad_norms", input_grads},
                      {"metrics", metrics},
                      {"observations", s.observations},
                      {"seconds", s.seconds},
                      {"cpu_seconds", s.cpu_seconds}};
  if (!s.shared_value_digests.empty()) {
    nlohmann::json values = nlohmann::json::object();
    for (const auto& [name, d] : s.shared_value_digests) values[name] = digest_hex(d);
    j["shared_values"] = std::move(values);
  }
  return j;
}

[[maybe_unused]] const bool kRegistered = (register_model_program(), true);

}  // namespace

void set_valid_tokens(MetricCollector& collector, const GPTModel& model) {
  const at::Tensor valid = model.local_valid_tokens();
  if (!valid.defined()) return;
  const ParallelContext& par = model.parallel();
  // Sequence parallelism splits the local rows over TP in contiguous parts.
  const bool sp = model.config().sequence_parallel && par.tp_size() > 1;
  collector.set_valid_tokens(valid, sp ? valid.chunk(par.tp_size())[par.tp_rank()] : at::Tensor());
}

TrainingResult run_training(GPTModel& model, const TrainingOptions& o) {
  TrainingResult result;
  std::optional<TensorObservationCapture> capture;
  const KindSet trace_kinds = o.kinds.empty() ? first_wave_kinds() : o.kinds;
  MetricCollector* collector = o.executor ? o.collector : nullptr;
  if (o.recorder && collector) {
    TensorObservationCallback record = o.recorder->callback();
    TensorObservationCallback collect = collector->callback();
    capture.emplace(
        [record, collect, trace_kinds](const ObservationOwner& owner, std::string_view name,
                                       SourceKind kind, const at::Tensor& t, OptionalDim tp,
                                       OptionalDim seq, OptionalDim batch) {
          if (trace_kinds.contains(kind)) record(owner, name, kind, t, tp, seq, batch);
          collect(owner, name, kind, t, tp, seq, batch);
        },
        KindSet::from_bits(trace_kinds.bits() | collector->kinds().bits()));
  } else if (o.recorder) {
    capture.emplace(o.recorder->callback(), trace_kinds);
  } else if (collector) {
    capture.emplace(collector->callback(), collector->kinds());
  }
  std::unique_ptr<Optimizer> own_optimizer;
  Optimizer* optimizer = o.optimizer;
  if (optimizer == nullptr) {
    OptimizerSettings settings;
    settings.lr = o.lr;
    settings.distributed = o.distributed_optimizer;
    own_optimizer = std::make_unique<Optimizer>(
        settings, model.parameters(), model.parallel().dp_rank(), model.parallel().dp_size());
    optimizer = own_optimizer.get();
  }
  std::optional<std::vector<ScheduleStep>> schedule;
  if (model.parallel().pp_size() > 1) schedule = stage_schedule(model, o.microbatches);
  for (std::int64_t s = o.first_step; s < o.steps; ++s) {
    result.steps.push_back(
        run_step(model, o, s, o.recorder, *optimizer, schedule ? &*schedule : nullptr));
    if (collector) {
      for (const MetricResult& m : collector->commit(*o.executor))
        result.steps.back().metrics.push_back({m.metric, m.label, m.value});
    }
    std::vector<StepMetric>& metrics = result.steps.back().metrics;
    std::sort(metrics.begin(), metrics.end(), [](const StepMetric& a, const StepMetric& b) {
      return std::tie(a.metric, a.label) < std::tie(b.metric, b.label);
    });
    // The step is done: the supervisor may print its row now (parity run).
    const StepResult& done = result.steps.back();
    publish_step_row(StepRow{done.step, done.loss, done.observations, done.seconds});
    if (o.after_step) o.after_step(s);
  }
  return result;
}

nlohmann::json run_model_program(RankContext& ctx) {
  // The rank program's arguments are the run's RunConfig (harness/config/launch_mapping.h).
  const RunConfig config = run_config_from_json(ctx.arguments);
  const std::unique_ptr<Backend> backend = make_backend(config.backend);
  std::unique_ptr<LoadedWeights> weights;
  std::unique_ptr<checkpoint::Reader> resume;
  std::unique_ptr<checkpoint::ParameterLoader> from_checkpoint;
  ParameterSource* source = nullptr;
  if (!config.resume.empty()) {
    resume = std::make_unique<checkpoint::Reader>(config.resume);
    from_checkpoint = std::make_unique<checkpoint::ParameterLoader>(*resume);
    source = from_checkpoint.get();
  } else if (!config.load_weights.empty()) {
    weights = std::make_unique<LoadedWeights>(config.load_weights);
    source = weights.get();
  }
  GPTModel model(model_config_from(config), *backend, ParallelContext::from(ctx.groups), source);
  weights.reset();  // the model holds its own shards
  from_checkpoint.reset();
  Optimizer optimizer(optimizer_settings(config), model.parameters(), model.parallel().dp_rank(),
                      model.parallel().dp_size());
  Resumed resumed;
  if (resume) {
    resumed = resume_from(*resume, config, model, optimizer, ctx.rank);
    resume.reset();
  }
  std::unique_ptr<LoadedBatch> batch;
  if (!config.load_batch.empty())
    batch = std::make_unique<LoadedBatch>(config.load_batch, config.global_batch(), config.seq,
                                          config.micro_batch, config.vocab);
  std::unique_ptr<TraceRecorder> recorder;
  // --dump holds the trace too.
  if (!config.trace.empty() || !config.dump.empty())
    recorder = std::make_unique<TraceRecorder>(ctx.rank);
  std::unique_ptr<MetricCollector> collector;
  std::unique_ptr<MetricExecutor> executor;
  TrainingOptions options;
  if (!config.metrics.empty()) {
    const std::vector<MetricSpec> specs = parse_metric_names(config.metrics);
    for (const MetricSpec& s : specs)
      if (s.source == MetricSource::parameters) options.parameter_metrics.push_back(s.name);
    if (options.parameter_metrics.size() < specs.size()) {
      collector = std::make_unique<MetricCollector>(make_metrics(specs), ctx.topology, ctx.rank,
                                                    backend.get());
      set_valid_tokens(*collector, model);
      executor = std::make_unique<MetricExecutor>(ctx.groups);
    }
  }
  options.distributed_optimizer = config.distributed_optimizer;
  options.optimizer = &optimizer;
  options.first_step = resumed.step;
  options.steps = config.steps;
  options.eval_every = config.eval_every;
  options.microbatches = config.microbatches;
  options.lr = config.lr;
  options.batch = batch.get();
  // The router's diagnostics site too where the model declines it (SP x TP or
  // CP split the sequences): a notification there is a broken rule the trace
  // must show (fault diagnostics-under-cp).
  options.kinds = model_source_kinds(config);
  if (config.moe_experts >= 2) options.kinds.insert(SourceKind::router_diagnostics);
  options.padding_token_shift = config.padding_token_shift;
  std::unique_ptr<RunDump> dump;
  if (!config.dump.empty()) {
    dump = std::make_unique<RunDump>(model, dump_staging_path(config.dump), ctx.rank == 0,
                                     config.steps, config.microbatches, batch.get());
    dump->write_weights_and_inputs();
    options.after_backward = [&](std::int64_t step, const std::vector<at::Tensor>& logits,
                                 const std::vector<at::Tensor>& token_losses) {
      dump->write_outputs(step, logits, token_losses);
    };
    options.after_finalize_grads = [&](std::int64_t step) { dump->write_gradients(step); };
    recorder->keep_values(dump_keeps_values_of);
  }
  options.recorder = recorder.get();
  options.collector = collector.get();
  options.executor = executor.get();
  std::string saved;  // the last checkpoint's folder
  options.after_step = [&](std::int64_t step) {
    const bool first = step == options.first_step;
    if (save_due(config, step)) {
      std::function<void()> fault_point;
      if (first) fault_point = [&] { ctx.fault_point("model: during the save after step 0"); };
      saved = save_after_step(config, step, model, optimizer, ctx.rank, &ctx.group(Axis::world),
                              fault_point);
    } else if (first) {
      ctx.fault_point("model: after step 0");
    }
    ctx.check_cancelled();
  };
  const TrainingResult trained = run_training(model, options);
  if (dump) dump->write_observations(*recorder);  // every rank its own file

  nlohmann::json steps = nlohmann::json::array();
  for (const StepResult& s : trained.steps) steps.push_back(step_json(s));
  // How each parameter this rank holds is split over TP ("shard" or
  // "replica"): which ranks must hold identical copies (replica_consistency).
  nlohmann::json parameters = nlohmann::json::object();
  for (const Parameter& p : model.parameters())
    parameters[p.name] = p.shard.replicated() ? "replica" : "shard";
  nlohmann::json coordinates = {
      {"tp", ctx.coordinates.tp}, {"cp", ctx.coordinates.cp}, {"dp", ctx.coordinates.dp}};
  if (ctx.coordinates.pipelined) coordinates["pp"] = ctx.coordinates.pp;
  nlohmann::json j = {{"rank", ctx.rank},
                      {"coordinates", coordinates},
                      {"parameters", parameters},
                      {"steps", steps},
                      {"final_parameters", final_parameters(model)}};
  if (!config.resume.empty())
    j["resumed"] = {{"step", resumed.step}, {"rng_restored", resumed.rng_restored}};
  if (!saved.empty()) j["checkpoint"] = saved;
  nlohmann::json collectives = nlohmann::json::object();
  for (Axis axis :
       {Axis::tp, Axis::cp, Axis::dp, Axis::world, Axis::ep, Axis::pp, Axis::etp, Axis::edp}) {
    // ep, pp, etp and edp only when they are groups of their own, so other
    // runs report what they did.
    if (axis == Axis::ep && ctx.topology.ep() == 1) continue;
    if (axis == Axis::pp && ctx.topology.pp() == 1) continue;
    if ((axis == Axis::etp || axis == Axis::edp) && ctx.topology.etp() == ctx.topology.tp())
      continue;
    const Communicator& c = ctx.group(axis);
    collectives[std::string(to_string(axis))] = {{"ranks", c.global_ranks()},
                                                 {"calls", c.calls_issued()},
                                                 {"hash", digest_hex(c.call_hash())}};
  }
  j["collectives"] = std::move(collectives);
  if (ctx.topology.pp() > 1) {
    // Point-to-point traffic per peer stage (global rank): rank a's sends to b
    // hash as rank b's receives from a when every message arrived as sent.
    const Communicator& pp = ctx.group(Axis::pp);
    nlohmann::json messages = nlohmann::json::array();
    for (const PointToPointTally& t : pp.point_to_point_tallies()) {
      if (t.sends == 0 && t.recvs == 0) continue;
      messages.push_back({{"peer", pp.global_ranks()[static_cast<std::size_t>(t.peer)]},
                          {"sends", t.sends},
                          {"send_hash", digest_hex(t.send_hash)},
                          {"recvs", t.recvs},
                          {"recv_hash", digest_hex(t.recv_hash)}});
    }
    j["point_to_point"] = std::move(messages);
  }
  if (dump) j["dump"] = dump->files();
  if (recorder) {
    j["counts"] = recorder->counts();
    nlohmann::json trace = nlohmann::json::array();
    for (const TraceRecord& r : recorder->records())
      trace.push_back(nlohmann::json::parse(to_json(r).dump()));
    j["trace"] = std::move(trace);
  }
  return j;
}

void register_model_program() {
  // A program already registered under the name stays: a test's stand-in.
  const std::vector<std::string> names = rank_program_names();
  if (std::find(names.begin(), names.end(), kModelProgram) == names.end())
    register_rank_program(kModelProgram, run_model_program);
}

}  // namespace parity
