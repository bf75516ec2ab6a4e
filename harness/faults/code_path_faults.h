#pragma once
// Code-path faults: small, documented deviations compiled into the real code
// paths of parity (off by default), each reproducing a bug class of
// megatron-reference.md section 7. `--inject NAME` switches one on for a run;
// `parity mutants` proves the property suite catches every one of them.
//
// One list (code_path_faults.def) defines them all: what each changes, and
// which property is expected to catch it under which scenario. A file that
// uses a fault names it once, at file scope:
//   PARITY_USES_FAULT(sqrt_before_sum);
//   ... if (fault_active(fault_sqrt_before_sum)) ...
// which resolves the id when the program starts (an id not in the list aborts
// every binary that links the file, before any test runs). This header does
// not hold the list, so adding a fault recompiles only the list's .cpp and the
// files that use the new fault.
//
// Code asks `fault_active(fault)`: a thread-local bit, set for the rank
// thread by the launcher (run_rank_body) from the run's --inject values. Autograd on
// CPU runs backward on the calling thread, so recomputation sees the bit too; a
// backend whose backward runs elsewhere carries the bits with the per-thread
// context (harness/observation/thread_context.h).
//
// A leaf room: it includes nothing of parity's.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace parity {

// One row of code_path_faults.def, by its position there.
struct CodePathFault {
  std::uint8_t index = 0;
  friend bool operator==(CodePathFault a, CodePathFault b) { return a.index == b.index; }
  friend bool operator!=(CodePathFault a, CodePathFault b) { return a.index != b.index; }
};

struct CodePathFaultInfo {
  CodePathFault fault;
  std::string_view id;         // the .def id: "sqrt_before_sum"
  std::string_view name;       // the --inject spelling: "sqrt-before-sum"
  std::string_view doc;        // what the deviation does, one line
  std::string_view caught_by;  // the property expected to fail: "sharded_reduction"
  std::string_view needs;      // the scenario that exposes it: "an l2/rms metric on a split tensor"
};

// Every code-path fault, in the list's order.
const std::vector<CodePathFaultInfo>& code_path_faults();
const CodePathFaultInfo& info(CodePathFault fault);
// By its --inject spelling.
std::optional<CodePathFault> parse_code_path_fault(std::string_view name);
// By its .def id; an unknown id prints the id and aborts (a programming error,
// met when the program starts: see PARITY_USES_FAULT).
CodePathFault code_path_fault_with_id(std::string_view id);
// The bit of `fault` in a set of switched-on faults (fault_active's encoding).
constexpr std::uint64_t code_path_fault_bit(CodePathFault fault) {
  return std::uint64_t{1} << fault.index;
}

// `static const CodePathFault fault_<id>`, resolved at static initialization.
#define PARITY_USES_FAULT(id)                                        \
  [[maybe_unused]] static const ::parity::CodePathFault fault_##id = \
      ::parity::code_path_fault_with_id(#id)

namespace detail {
// Inline and constant-initialized: every TU reads the thread-local slot directly
// (no TLS wrapper call; UBSan flagged the extern form's wrapper as a null load).
inline thread_local std::uint64_t t_active_code_path_faults = 0;
// The innermost live CodePathFaultScope: a scope destroyed while a later one is
// alive aborts with a message instead of restoring a stale set.
inline thread_local const void* t_code_path_fault_owner = nullptr;
}  // namespace detail

// Whether `fault` is switched on for this thread. Inline: the check sits in
// hot paths (observe, every collective).
inline bool fault_active(CodePathFault fault) {
  return (detail::t_active_code_path_faults >> fault.index) & 1u;
}

// RAII: switches this thread's code-path faults to exactly those named (or adds
// the single `fault`) and restores the previous set on exit.
class [[nodiscard]] CodePathFaultScope {
 public:
  // The run's `--inject` values; names that are no code-path fault (such as
  // `crash-rank=1`) are ignored.
  explicit CodePathFaultScope(const std::vector<std::string>& injected);
  explicit CodePathFaultScope(CodePathFault fault);
  ~CodePathFaultScope();
  CodePathFaultScope(const CodePathFaultScope&) = delete;
  CodePathFaultScope& operator=(const CodePathFaultScope&) = delete;

 private:
  struct Exactly {
    std::uint64_t bits;
  };
  explicit CodePathFaultScope(Exactly set);
  std::uint64_t previous_;
  const void* outer_;
};

}  // namespace parity
