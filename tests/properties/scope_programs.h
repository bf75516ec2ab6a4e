#pragma once
// The programs of the scope_semantics property (test_scope_semantics.cpp):
// nested capture / suspend / observe / grad-mode / throw / catch steps, their
// rapidcheck generators and shrinks, and how a counterexample prints.
#include <rapidcheck.h>

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "harness/observation/tensor_observation.h"

namespace parity::testing {

// --- programs ---------------------------------------------------------------------

enum class Op {
  observe,     // observe_tensor(owner, "site", kind, tensor, tp_shard_dim)
  residuals,   // observe_layer_residuals(owner with the given config, acc, out)
  throw_boom,  // throw Boom: the rest of the block does not run
  capture,     // TensorObservationCapture(callback #id, kinds) { body }
  suspend,     // TensorObservationSuspension { body }
  grad_mode,   // at::AutoGradMode(grad_enabled) { body }: must change nothing
  catch_boom,  // try { body } catch (Boom) {}
};

struct Step {
  Op op = Op::observe;
  SourceKind kind = SourceKind::residual_accumulator;  // observe
  OptionalDim tp_shard_dim;                            // observe
  std::optional<bool> sequence_parallel;               // residuals: nullopt = owner without config
  KindSet kinds;                                       // capture
  bool callback_throws = false;                        // capture: its callback throws Boom
  bool grad_enabled = false;                           // grad_mode
  int id = -1;                                         // capture: numbered in pre-order
  std::vector<Step> body;                              // capture, suspend, grad_mode, catch_boom
};

inline bool has_body(Op op) {
  return op == Op::capture || op == Op::suspend || op == Op::grad_mode || op == Op::catch_boom;
}

// One program per thread.
struct ThreadPrograms {
  std::vector<std::vector<Step>> threads;
};

struct Boom {};

// --- printing (rapidcheck's counterexample) ---------------------------------------

inline std::string kinds_text(KindSet kinds) {
  std::string s = "{";
  for (int i = 0; i < kSourceKindCount; ++i) {
    const auto k = static_cast<SourceKind>(i);
    if (!kinds.contains(k)) continue;
    if (s.size() > 1) s += ", ";
    s += std::string(to_string(k));
  }
  return s + "}";
}

inline std::string dim_text(OptionalDim d) { return d ? std::to_string(*d) : "none"; }

inline void print_block(const std::vector<Step>& block, int indent, std::ostream& os);

inline void print_step(const Step& s, int indent, std::ostream& os) {
  os << std::string(indent, ' ');
  switch (s.op) {
    case Op::observe:
      os << "observe " << to_string(s.kind) << " tp=" << dim_text(s.tp_shard_dim) << "\n";
      return;
    case Op::residuals:
      os << "residuals config.sequence_parallel="
         << (s.sequence_parallel ? (*s.sequence_parallel ? "true" : "false") : "(no config)")
         << "\n";
      return;
    case Op::throw_boom:
      os << "throw\n";
      return;
    case Op::capture:
      os << "capture #" << s.id << " " << kinds_text(s.kinds)
         << (s.callback_throws ? " (callback throws)" : "");
      break;
    case Op::suspend:
      os << "suspend";
      break;
    case Op::grad_mode:
      os << (s.grad_enabled ? "enable_grad" : "no_grad");
      break;
    case Op::catch_boom:
      os << "try";
      break;
  }
  os << " {\n";
  print_block(s.body, indent + 2, os);
  os << std::string(indent, ' ') << "}" << (s.op == Op::catch_boom ? " catch (Boom)" : "") << "\n";
}

inline void print_block(const std::vector<Step>& block, int indent, std::ostream& os) {
  for (const Step& s : block) print_step(s, indent, os);
}

inline void showValue(const ThreadPrograms& p, std::ostream& os) {
  os << "\n";
  for (std::size_t t = 0; t < p.threads.size(); ++t) {
    os << "thread " << t << ":\n";
    print_block(p.threads[t], 2, os);
  }
}

// --- generators ---------------------------------------------------------------------
// Small pieces composed with gen::weightedOneOf and a depth-bounded recursion
// (gen::lazy). Blocks are containers, so shrinking drops steps and empties
// bodies; every scalar choice shrinks toward its simplest value.

constexpr int kNominalSize = 100;  // choices drawn at full range whatever the case's size
constexpr int kMaxBlockLength = 4;
constexpr int kMaxProgramLength = 8;
constexpr int kMaxDepth = 6;
constexpr int kMaxThreads = 4;

template <typename T>
inline rc::Gen<T> full_range(rc::Gen<T> g) {
  return rc::gen::resize(kNominalSize, std::move(g));
}

inline rc::Gen<SourceKind> gen_kind() {
  return rc::gen::map(full_range(rc::gen::inRange(0, kSourceKindCount)),
                      [](int i) { return static_cast<SourceKind>(i); });
}

// 0-6 kinds drawn with repetition: the empty set, a few kinds and (rarely)
// most of them; shrinks by dropping kinds.
inline rc::Gen<KindSet> gen_kinds() {
  return rc::gen::map(rc::gen::resize(6, rc::gen::container<std::vector<SourceKind>>(gen_kind())),
                      [](const std::vector<SourceKind>& ks) {
                        KindSet s;
                        for (SourceKind k : ks) s.insert(k);
                        return s;
                      });
}

inline rc::Gen<OptionalDim> gen_dim() {
  // none, 0, 1, -1 (vocab-sharded logits use negative dims)
  return rc::gen::map(full_range(rc::gen::inRange(0, 4)), [](int i) -> OptionalDim {
    if (i == 0) return std::nullopt;
    return i == 3 ? -1 : i - 1;
  });
}

inline rc::Gen<std::optional<bool>> gen_sequence_parallel() {
  return rc::gen::map(full_range(rc::gen::inRange(0, 3)), [](int i) -> std::optional<bool> {
    if (i == 0) return std::nullopt;
    return i == 2;
  });
}

inline rc::Gen<Step> gen_step(int depth);

inline rc::Gen<std::vector<Step>> gen_block(int depth, int max_length) {
  return rc::gen::resize(max_length,
                         rc::gen::container<std::vector<Step>>(full_range(gen_step(depth))));
}

inline rc::Gen<Step> gen_step(int depth) {
  using rc::gen::build;
  using rc::gen::just;
  using rc::gen::set;
  const rc::Gen<Step> observe =
      build<Step>(set(&Step::op, just(Op::observe)), set(&Step::kind, gen_kind()),
                  set(&Step::tp_shard_dim, gen_dim()));
  const rc::Gen<Step> residuals = build<Step>(
      set(&Step::op, just(Op::residuals)), set(&Step::sequence_parallel, gen_sequence_parallel()));
  const rc::Gen<Step> throw_boom = build<Step>(set(&Step::op, just(Op::throw_boom)));
  if (depth >= kMaxDepth)
    return rc::gen::weightedOneOf<Step>({{3, observe}, {1, residuals}, {1, throw_boom}});
  // Bodies are built only when drawn, so the recursion is as deep as the program.
  const rc::Gen<std::vector<Step>> body =
      rc::gen::lazy([depth] { return gen_block(depth + 1, kMaxBlockLength); });
  const rc::Gen<Step> capture = build<Step>(
      set(&Step::op, just(Op::capture)), set(&Step::kinds, gen_kinds()),
      set(&Step::callback_throws,
          rc::gen::map(full_range(rc::gen::inRange(0, 6)), [](int i) { return i == 5; })),
      set(&Step::body, body));
  const rc::Gen<Step> suspend =
      build<Step>(set(&Step::op, just(Op::suspend)), set(&Step::body, body));
  const rc::Gen<Step> grad_mode = build<Step>(
      set(&Step::op, just(Op::grad_mode)),
      set(&Step::grad_enabled,
          rc::gen::map(full_range(rc::gen::inRange(0, 3)), [](int i) { return i == 2; })),
      set(&Step::body, body));
  const rc::Gen<Step> catch_boom =
      build<Step>(set(&Step::op, just(Op::catch_boom)), set(&Step::body, body));
  return rc::gen::weightedOneOf<Step>({{3, observe},
                                       {1, residuals},
                                       {1, throw_boom},
                                       {2, capture},
                                       {1, suspend},
                                       {1, grad_mode},
                                       {1, catch_boom}});
}

// Pre-order numbering of the captures, so a trace names which callback fired.
inline void number_captures(std::vector<Step>& block, int& next) {
  for (Step& s : block) {
    if (s.op == Op::capture) s.id = next++;
    number_captures(s.body, next);
  }
}

inline ThreadPrograms numbered(std::vector<std::vector<Step>> threads) {
  for (auto& t : threads) {
    int next = 0;
    number_captures(t, next);
  }
  return ThreadPrograms{std::move(threads)};
}

// Structural shrinks, tried before the composed generators' own: drop a thread,
// drop a step, replace a scope by its body (which the composed generators cannot
// do), simplify a step's fields; recursively into bodies. Once one of these is
// taken only these apply, so they cover everything the composed shrinks do.
inline std::vector<Step> step_shrinks(const Step& s);

inline std::vector<std::vector<Step>> block_shrinks(const std::vector<Step>& block) {
  std::vector<std::vector<Step>> out;
  for (std::size_t i = 0; i < block.size(); ++i) {
    std::vector<Step> dropped = block;
    dropped.erase(dropped.begin() + static_cast<std::ptrdiff_t>(i));
    out.push_back(dropped);
    if (has_body(block[i].op)) {  // a scope or a try: keep only its body
      std::vector<Step> hoisted(block.begin(), block.begin() + static_cast<std::ptrdiff_t>(i));
      hoisted.insert(hoisted.end(), block[i].body.begin(), block[i].body.end());
      hoisted.insert(hoisted.end(), block.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                     block.end());
      out.push_back(std::move(hoisted));
    }
  }
  for (std::size_t i = 0; i < block.size(); ++i) {
    for (Step simpler : step_shrinks(block[i])) {
      std::vector<Step> c = block;
      c[i] = std::move(simpler);
      out.push_back(std::move(c));
    }
  }
  return out;
}

inline std::vector<Step> step_shrinks(const Step& s) {
  std::vector<Step> out;
  auto with = [&](auto change) {
    Step c = s;
    change(c);
    out.push_back(std::move(c));
  };
  if (s.kind != SourceKind::residual_accumulator)
    with([](Step& c) { c.kind = SourceKind::residual_accumulator; });
  if (s.tp_shard_dim) with([](Step& c) { c.tp_shard_dim.reset(); });
  if (s.sequence_parallel) with([](Step& c) { c.sequence_parallel.reset(); });
  if (s.callback_throws) with([](Step& c) { c.callback_throws = false; });
  if (s.grad_enabled) with([](Step& c) { c.grad_enabled = false; });
  for (int i = 0; i < kSourceKindCount; ++i) {
    if (!s.kinds.contains(static_cast<SourceKind>(i))) continue;
    with([i](Step& c) { c.kinds = KindSet::from_bits(c.kinds.bits() & ~(1u << i)); });
  }
  for (std::vector<Step>& body : block_shrinks(s.body))
    with([&](Step& c) { c.body = std::move(body); });
  return out;
}

inline rc::Seq<ThreadPrograms> program_shrinks(const ThreadPrograms& p) {
  std::vector<ThreadPrograms> out;
  for (std::size_t t = 0; t < p.threads.size() && p.threads.size() > 1; ++t) {
    std::vector<std::vector<Step>> fewer = p.threads;
    fewer.erase(fewer.begin() + static_cast<std::ptrdiff_t>(t));
    out.push_back(numbered(std::move(fewer)));
  }
  for (std::size_t t = 0; t < p.threads.size(); ++t) {
    for (std::vector<Step>& simpler : block_shrinks(p.threads[t])) {
      std::vector<std::vector<Step>> c = p.threads;
      c[t] = std::move(simpler);
      out.push_back(numbered(std::move(c)));
    }
  }
  return rc::seq::fromContainer(std::move(out));
}

inline rc::Gen<ThreadPrograms> gen_thread_programs() {
  const auto program = full_range(gen_block(0, kMaxProgramLength));
  return rc::gen::shrink(
      rc::gen::map(
          rc::gen::resize(
              kMaxThreads,
              rc::gen::nonEmpty(rc::gen::container<std::vector<std::vector<Step>>>(program))),
          &numbered),
      &program_shrinks);
}

}  // namespace parity::testing
