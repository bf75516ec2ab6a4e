#pragma once
// Ctrl-C on a running sweep: the results file is crash-safe (results.h), so
// the sweep can stop at once; what it owes the person is how to continue.
#include <string>

namespace parity::sweep {

// While alive, SIGINT writes `message` on stderr and ends the process at once
// with exit code 130 (128 + SIGINT, as the default action reports it). A
// SIGINT that was ignored when this was made stays ignored (a background job
// of a non-interactive shell). One at a time; the destructor restores the
// previous action.
class InterruptMessage {
 public:
  explicit InterruptMessage(std::string message);
  ~InterruptMessage();
  InterruptMessage(const InterruptMessage&) = delete;
  InterruptMessage& operator=(const InterruptMessage&) = delete;

 private:
  std::string message_;
  bool installed_ = false;
};

}  // namespace parity::sweep
