#include "harness/observation/thread_context.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "harness/faults/code_path_faults.h"

namespace parity {
namespace detail {

RecomputeLog*& thread_recompute_log() {
  static thread_local RecomputeLog* log = nullptr;
  return log;
}

const void*& thread_recompute_log_owner() {
  static thread_local const void* owner = nullptr;
  return owner;
}

void scope_destroyed_out_of_order(std::string_view scope) {
  const std::string message =
      "parity: " + std::string(scope) +
      " destroyed out of order: a scope of the same kind created after it on this thread is "
      "still alive (scopes must end in reverse order of creation)\n";
  std::fputs(message.c_str(), stderr);
  std::abort();
}

}  // namespace detail

ThreadContext capture_thread_context() {
  ThreadContext c;
  c.observation_ = detail::observation_state;
  c.point_ = detail::current_execution_point;
  c.point_owner_ = detail::execution_point_owner;
  c.code_path_faults_ = detail::t_active_code_path_faults;
  c.code_path_fault_owner_ = detail::t_code_path_fault_owner;
  c.recompute_log_ = detail::thread_recompute_log();
  c.recompute_log_owner_ = detail::thread_recompute_log_owner();
  return c;
}

void ThreadContextScope::install(const ThreadContext& c) {
  detail::observation_state = c.observation_;
  detail::current_execution_point = c.point_;
  detail::execution_point_owner = c.point_owner_;
  detail::t_active_code_path_faults = c.code_path_faults_;
  detail::t_code_path_fault_owner = c.code_path_fault_owner_;
  detail::thread_recompute_log() = c.recompute_log_;
  detail::thread_recompute_log_owner() = c.recompute_log_owner_;
}

ThreadContextScope::ThreadContextScope(const ThreadContext& context)
    : installed_(context), previous_(capture_thread_context()) {
  install(installed_);
}

ThreadContextScope::~ThreadContextScope() {
  // Every scope opened under this one must have ended: each field's owner is
  // the one installed.
  const ThreadContext now = capture_thread_context();
  const ThreadContext& c = installed_;
  if (now.observation_.active != c.observation_.active ||
      now.observation_.suspension_owner != c.observation_.suspension_owner ||
      now.point_owner_ != c.point_owner_ ||
      now.code_path_fault_owner_ != c.code_path_fault_owner_ ||
      now.recompute_log_owner_ != c.recompute_log_owner_) {
    detail::scope_destroyed_out_of_order("ThreadContextScope");
  }
  install(previous_);
}

OriginContext capture_origin_context() {
  return OriginContext{capture_thread_context(), std::this_thread::get_id()};
}

OriginContextScope::OriginContextScope(const OriginContext& origin) {
  if (origin.thread != std::this_thread::get_id()) scope_.emplace(origin.context);
}

}  // namespace parity
