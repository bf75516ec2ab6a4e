// scope_semantics (contract.md sections 1 and 5; megatron-reference.md 1.3-1.6):
// random programs of nested capture / suspend / observe / grad-mode / throw /
// catch, each run on its own thread, several threads at once, compared event by
// event against a small executable model of the rules.
//
// A program runs twice: for real (RAII scopes, real exceptions, a worker thread)
// recording a trace of strings, and in the model (an explicit stack of frames,
// exceptions as return values) producing the trace the rules predict. A trace
// holds every notification (which capture's callback got which kind, name,
// owner, dims, and whether the tensor was the caller's object or the fresh
// contribution), a probe of the state after every step and every scope exit
// (is_observing_tensor per kind, plus the mirror in detail::observation_state),
// and where an exception was caught. Assertions run on the test thread only,
// after the workers joined. docs/property-suite.md.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <atomic>
#include <iostream>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness/faults/code_path_faults.h"
#include "harness/observation/tensor_observation.h"
#include "scenarios/quiet_listener.h"
#include "tests/properties/scope_programs.h"
#include "tests/support/named_owner.h"

PARITY_USES_FAULT(grad_mode_gating);

namespace parity {
namespace {

using namespace testing;  // scope_programs.h

// --- trace lines (shared by the model and the real run) ---------------------------

using Trace = std::vector<std::string>;

std::string probe_line(KindSet answered, bool suspended, bool active, std::uint32_t live_bits) {
  return "probe is_observing=" + kinds_text(answered) + " suspended=" + std::to_string(suspended) +
         " active=" + std::to_string(active) + " live_kinds=" + std::to_string(live_bits);
}

// `tensor`: "same" (the caller's very object), "fresh" (the contribution: a new
// tensor equal to output - accumulator, not requiring grad), or what is wrong.
std::string notification_line(int capture_id, const std::string& owner, std::string_view name,
                              SourceKind kind, OptionalDim tp, OptionalDim seq, OptionalDim batch,
                              const std::string& tensor) {
  std::ostringstream os;
  os << "callback #" << capture_id << " owner=" << owner << " name=" << name
     << " kind=" << to_string(kind) << " tp=" << dim_text(tp) << " seq=" << dim_text(seq)
     << " batch=" << dim_text(batch) << " tensor=" << tensor;
  return os.str();
}

using Owner = testing::NamedOwner;

const Owner& site_owner() {
  static const Owner owner("decoder.site", std::nullopt);
  return owner;
}

const Owner& residual_owner(std::optional<bool> sequence_parallel) {
  static const Owner no_config("decoder.layers.0", std::nullopt);
  static const Owner no_sp("decoder.layers.1", false);
  static const Owner sp("decoder.layers.2", true);
  if (!sequence_parallel) return no_config;
  return *sequence_parallel ? sp : no_sp;
}

// --- the model ------------------------------------------------------------------------
// Contract section 1 as a stack of frames: a scope pushes a copy of the top frame
// with its change and pops it on exit, whether the body finished or threw. A
// notification reaches the top frame's callback iff not suspended, a capture is
// active and the kind is in its set. Grad mode is not part of the state.

struct Frame {
  int capture_id = -1;  // -1: no capture active
  KindSet kinds;
  bool callback_throws = false;
  bool suspended = false;
};

struct Model {
  std::vector<Frame> stack{Frame{}};  // a new thread starts empty
  Trace trace;

  bool observing(SourceKind k) const {
    const Frame& f = stack.back();
    return !f.suspended && f.capture_id >= 0 && f.kinds.contains(k);
  }
  void probe() {
    const Frame& f = stack.back();
    KindSet live;
    for (int i = 0; i < kSourceKindCount; ++i)
      if (observing(static_cast<SourceKind>(i))) live.insert(static_cast<SourceKind>(i));
    trace.push_back(probe_line(live, f.suspended, f.capture_id >= 0, live.bits()));
  }
  // Returns true when the callback threw.
  bool notify(const std::string& owner, std::string_view name, SourceKind kind, OptionalDim tp,
              OptionalDim seq, OptionalDim batch, const std::string& tensor) {
    if (!observing(kind)) return false;
    trace.push_back(
        notification_line(stack.back().capture_id, owner, name, kind, tp, seq, batch, tensor));
    return stack.back().callback_throws;
  }
  // Runs a scope's body in `frame`; true when a Boom left it.
  bool scope(const Frame& frame, const std::vector<Step>& body) {
    stack.push_back(frame);
    const bool threw = run(body);
    stack.pop_back();
    if (threw) probe();  // unwound: the state is the enclosing scope's again
    return threw;
  }
  // Returns true when a Boom left the block.
  bool run(const std::vector<Step>& block) {
    probe();
    for (const Step& s : block) {
      Frame inner = stack.back();
      bool threw = false;
      switch (s.op) {
        case Op::observe:
          threw = notify(site_owner().canonical_name(), "site", s.kind, s.tp_shard_dim,
                         std::nullopt, std::nullopt, "same");
          break;
        case Op::residuals: {
          const std::string& owner = residual_owner(s.sequence_parallel).canonical_name();
          const OptionalDim tp =
              s.sequence_parallel.value_or(false) ? OptionalDim(0) : std::nullopt;
          threw = notify(owner, "residual_accumulator", SourceKind::residual_accumulator, tp, 0, 1,
                         "same") ||
                  notify(owner, "residual_contribution", SourceKind::residual_contribution, tp, 0,
                         1, "fresh");
          break;
        }
        case Op::throw_boom:
          threw = true;
          break;
        case Op::capture:
          inner.capture_id = s.id;
          inner.kinds = s.kinds;
          inner.callback_throws = s.callback_throws;
          threw = scope(inner, s.body);
          break;
        case Op::suspend:
          inner.suspended = true;
          threw = scope(inner, s.body);
          break;
        case Op::grad_mode:
          threw = scope(inner, s.body);
          break;
        case Op::catch_boom:
          if (run(s.body)) trace.push_back("caught Boom");
          break;
      }
      if (threw) return true;
      probe();
    }
    return false;
  }
};

Trace model_trace(const std::vector<Step>& program) {
  Model m;
  if (m.run(program)) m.trace.push_back("Boom escaped the program");
  m.probe();
  return m.trace;
}

// --- the real run -----------------------------------------------------------------

struct RealRun {
  Trace trace;
  const at::Tensor site = at::zeros({1});
  const at::Tensor accumulator = at::ones({2, 1, 1}).requires_grad_();
  const at::Tensor output = at::full({2, 1, 1}, 3.0);
  const at::Tensor* expected_object = nullptr;  // what "same" means for the running step

  void probe() {
    KindSet answered;
    for (int i = 0; i < kSourceKindCount; ++i)
      if (is_observing_tensor(static_cast<SourceKind>(i)))
        answered.insert(static_cast<SourceKind>(i));
    const detail::ObservationState& st = detail::observation_state;
    trace.push_back(probe_line(answered, st.suspended, st.active != nullptr, st.live_kinds));
  }

  std::string tensor_check(std::string_view name, const at::Tensor& t) const {
    if (name != "residual_contribution")
      return &t == expected_object ? "same" : "not the caller's object";
    if (t.requires_grad()) return "contribution requires grad";
    if (t.data_ptr() == accumulator.data_ptr() || t.data_ptr() == output.data_ptr())
      return "contribution aliases an input";
    return (t.sizes() == accumulator.sizes() && (t == 2.0).all().item<bool>())
               ? "fresh"
               : "contribution wrong";
  }

  TensorObservationCallback callback(const Step& capture) {
    return [this, id = capture.id, throws = capture.callback_throws](
               const ObservationOwner& owner, std::string_view name, SourceKind kind,
               const at::Tensor& t, OptionalDim tp, OptionalDim seq, OptionalDim batch) {
      trace.push_back(notification_line(id, owner.canonical_name(), name, kind, tp, seq, batch,
                                        tensor_check(name, t)));
      if (throws) throw Boom();
    };
  }

  // A scope's step: the probe after unwinding, then the Boom goes on up.
  template <typename Body>
  void scope(Body&& body) {
    try {
      body();
    } catch (const Boom&) {
      probe();
      throw;
    }
  }

  void step(const Step& s) {
    switch (s.op) {
      case Op::observe:
        expected_object = &site;
        observe_tensor(site_owner(), "site", s.kind, site, s.tp_shard_dim);
        return;
      case Op::residuals:
        expected_object = &accumulator;
        observe_layer_residuals(residual_owner(s.sequence_parallel), accumulator, output);
        return;
      case Op::throw_boom:
        throw Boom();
      case Op::capture:
        return scope([&] {
          auto c = capture_tensor_observations(callback(s), s.kinds);
          run(s.body);
        });
      case Op::suspend:
        return scope([&] {
          auto sus = suspend_tensor_observations();
          run(s.body);
        });
      case Op::grad_mode:
        return scope([&] {
          at::AutoGradMode grad(s.grad_enabled);
          run(s.body);
        });
      case Op::catch_boom:
        try {
          run(s.body);
        } catch (const Boom&) {
          trace.push_back("caught Boom");
        }
        return;
    }
  }

  void run(const std::vector<Step>& block) {
    probe();
    for (const Step& s : block) {
      step(s);
      probe();
    }
  }
};

Trace real_trace(const std::vector<Step>& program) {
  RealRun r;
  try {
    r.run(program);
  } catch (const Boom&) {
    r.trace.push_back("Boom escaped the program");
  } catch (const std::exception& e) {
    r.trace.push_back(std::string("unexpected exception: ") + e.what());
  } catch (...) {
    r.trace.push_back("unexpected exception");
  }
  r.probe();
  return r.trace;
}

// "" when equal, else the first difference with a few lines of context.
std::string first_difference(std::size_t thread, const Trace& expected, const Trace& actual) {
  std::size_t i = 0;
  while (i < expected.size() && i < actual.size() && expected[i] == actual[i]) ++i;
  if (i == expected.size() && i == actual.size()) return "";
  std::ostringstream os;
  os << "thread " << thread << ", trace line " << i << ":\n";
  for (std::size_t j = i >= 3 ? i - 3 : 0; j < i; ++j) os << "    " << expected[j] << "\n";
  os << "  model:  " << (i < expected.size() ? expected[i] : "(end of trace)") << "\n";
  os << "  actual: " << (i < actual.size() ? actual[i] : "(end of trace)") << "\n";
  return os.str();
}

// Runs every program on its own thread, all at once, while the test thread has
// its own capture open (all kinds): a worker must start empty and never reach
// it. Returns "" when every trace matches the model.
std::string run_and_compare(const ThreadPrograms& p, bool inject_grad_mode_gating) {
  const std::size_t n = p.threads.size();
  std::vector<Trace> actual(n);
  std::atomic<int> reached_test_thread{0};
  std::atomic<std::size_t> ready{0};
  KindSet answered_while_open;
  {
    auto own = capture_tensor_observations(
        [&](const ObservationOwner&, std::string_view, SourceKind, const at::Tensor&, OptionalDim,
            OptionalDim, OptionalDim) { ++reached_test_thread; },
        KindSet::all());
    std::vector<std::thread> workers;
    for (std::size_t t = 0; t < n; ++t) {
      workers.emplace_back([&, t] {
        std::optional<CodePathFaultScope> fault;
        if (inject_grad_mode_gating) fault.emplace(fault_grad_mode_gating);
        ++ready;
        while (ready.load() < n) std::this_thread::yield();  // overlap the programs
        actual[t] = real_trace(p.threads[t]);
      });
    }
    for (std::thread& w : workers) w.join();
    for (int i = 0; i < kSourceKindCount; ++i)
      if (is_observing_tensor(static_cast<SourceKind>(i)))
        answered_while_open.insert(static_cast<SourceKind>(i));
  }
  std::ostringstream failures;
  if (reached_test_thread != 0)
    failures << reached_test_thread
             << " notifications of worker threads reached the test thread's callback\n";
  if (answered_while_open != KindSet::all())
    failures << "the test thread's own capture changed: is_observing="
             << kinds_text(answered_while_open) << "\n";
  if (detail::observation_state.active != nullptr || detail::observation_state.suspended ||
      detail::observation_state.live_kinds != 0)
    failures << "the test thread's state is not empty after its capture closed\n";
  for (std::size_t t = 0; t < n; ++t)
    failures << first_difference(t, model_trace(p.threads[t]), actual[t]);
  return failures.str();
}

// Coverage tags: how many cases reached each interesting situation.
void tag_coverage(const std::vector<Step>& block, bool in_capture, bool in_no_grad, bool in_suspend,
                  std::vector<std::string>& tags) {
  for (const Step& s : block) {
    if (s.op == Op::capture && in_capture) tags.push_back("capture in capture");
    if (s.op == Op::capture && in_suspend) tags.push_back("capture in suspend");
    if (s.op == Op::observe && in_capture && in_no_grad) tags.push_back("observe under no_grad");
    if (s.op == Op::throw_boom && (in_capture || in_suspend)) tags.push_back("throw in a scope");
    tag_coverage(s.body, in_capture || s.op == Op::capture,
                 s.op == Op::grad_mode ? !s.grad_enabled : in_no_grad,
                 in_suspend || s.op == Op::suspend, tags);
  }
}

// The property's body; with `inject_grad_mode_gating` every program thread runs
// with the code-path fault grad-mode-gating switched on (for a test that the
// search then finds a counterexample, once that fault has an effect).
void scope_semantics_case(bool inject_grad_mode_gating) {
  const ThreadPrograms programs = *gen_thread_programs();
  std::vector<std::string> tags;
  for (const auto& t : programs.threads) tag_coverage(t, false, false, false, tags);
  for (const char* tag :
       {"capture in capture", "capture in suspend", "observe under no_grad", "throw in a scope"})
    RC_CLASSIFY(std::find(tags.begin(), tags.end(), tag) != tags.end(), tag);
  const std::string failures = run_and_compare(programs, inject_grad_mode_gating);
  if (!failures.empty()) RC_FAIL(failures);
}

RC_GTEST_PROP(ScopeSemantics, scope_semantics_random_programs_on_threads_follow_the_model, ()) {
  scope_semantics_case(/*inject_grad_mode_gating=*/false);
}

// The property must have teeth: with the first Megatron revision's rule
// (observation skipped while grad mode is off, the code-path fault
// grad-mode-gating) the same search finds a counterexample, a no_grad step.
TEST(ScopeSemantics, scope_semantics_catches_grad_mode_gating) {
  const scenarios::QuietSearch search =
      scenarios::search_quietly("ScopeSemantics/scope_semantics_catches_grad_mode_gating",
                                [] { scope_semantics_case(/*inject_grad_mode_gating=*/true); });
  ASSERT_TRUE(search.failed) << "grad-mode-gating was not caught:\n" << search.message;
  std::cout << "caught, as expected:\n" << search.message << std::endl;
  EXPECT_NE(search.message.find("no_grad"), std::string::npos)
      << "the counterexample has no no_grad step";
}

}  // namespace
}  // namespace parity
