#include "harness/faults/code_path_faults.h"

#include <cstdio>
#include <cstdlib>

namespace parity {

const std::vector<CodePathFaultInfo>& code_path_faults() {
  static const std::vector<CodePathFaultInfo> table = [] {
    std::vector<CodePathFaultInfo> rows;
#define PARITY_CODE_PATH_FAULT(id, name, doc, caught_by, needs) \
  rows.push_back(                                               \
      {CodePathFault{static_cast<std::uint8_t>(rows.size())}, #id, name, doc, caught_by, needs});
#include "harness/faults/code_path_faults.def"
#undef PARITY_CODE_PATH_FAULT
    // fault_active's set is one std::uint64_t.
    if (rows.size() > 64) {
      std::fputs("parity: code_path_faults.def has more than 64 faults\n", stderr);
      std::abort();
    }
    return rows;
  }();
  return table;
}

const CodePathFaultInfo& info(CodePathFault fault) { return code_path_faults()[fault.index]; }

std::optional<CodePathFault> parse_code_path_fault(std::string_view name) {
  for (const CodePathFaultInfo& f : code_path_faults())
    if (f.name == name) return f.fault;
  return std::nullopt;
}

CodePathFault code_path_fault_with_id(std::string_view id) {
  for (const CodePathFaultInfo& f : code_path_faults())
    if (f.id == id) return f.fault;
  std::fprintf(stderr, "parity: PARITY_USES_FAULT(%.*s): no such fault in code_path_faults.def\n",
               static_cast<int>(id.size()), id.data());
  std::abort();
}

CodePathFaultScope::CodePathFaultScope(Exactly set)
    : previous_(detail::t_active_code_path_faults), outer_(detail::t_code_path_fault_owner) {
  detail::t_active_code_path_faults = set.bits;
  detail::t_code_path_fault_owner = this;
}

CodePathFaultScope::CodePathFaultScope(const std::vector<std::string>& injected)
    : CodePathFaultScope(Exactly{[&] {
        std::uint64_t m = 0;
        for (const std::string& name : injected)
          if (auto f = parse_code_path_fault(name)) m |= code_path_fault_bit(*f);
        return m;
      }()}) {}

CodePathFaultScope::CodePathFaultScope(CodePathFault fault)
    : previous_(detail::t_active_code_path_faults), outer_(detail::t_code_path_fault_owner) {
  detail::t_active_code_path_faults = previous_ | code_path_fault_bit(fault);
  detail::t_code_path_fault_owner = this;
}

CodePathFaultScope::~CodePathFaultScope() {
  if (detail::t_code_path_fault_owner != this) {
    // The leaf room's copy of the observation room's scope-order message.
    std::fputs(
        "parity: CodePathFaultScope destroyed out of order: a scope created after it on "
        "this thread is still alive (scopes must end in reverse order of creation)\n",
        stderr);
    std::abort();
  }
  detail::t_active_code_path_faults = previous_;
  detail::t_code_path_fault_owner = outer_;
}

}  // namespace parity
