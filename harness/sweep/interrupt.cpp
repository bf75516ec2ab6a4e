#include "harness/sweep/interrupt.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

namespace parity::sweep {
namespace {

// The handler may use only async-signal-safe calls: the text is prepared
// before the handler is installed, and read through these.
std::atomic<const char*> g_message{nullptr};
std::atomic<std::size_t> g_length{0};
struct sigaction g_previous;

void on_interrupt(int) {
  const char* text = g_message.load();
  std::size_t left = g_length.load();
  while (text && left > 0) {
    const ssize_t n = ::write(STDERR_FILENO, text, left);
    if (n <= 0) break;
    text += n;
    left -= static_cast<std::size_t>(n);
  }
  ::_exit(128 + SIGINT);
}

}  // namespace

InterruptMessage::InterruptMessage(std::string message) : message_(std::move(message)) {
  struct sigaction current;
  if (::sigaction(SIGINT, nullptr, &current) != 0 || current.sa_handler == SIG_IGN) return;
  const char* expected = nullptr;
  if (!g_message.compare_exchange_strong(expected, message_.c_str())) return;  // one at a time
  g_length = message_.size();
  struct sigaction action;
  std::memset(&action, 0, sizeof action);
  action.sa_handler = on_interrupt;
  sigemptyset(&action.sa_mask);
  if (::sigaction(SIGINT, &action, &g_previous) != 0) {
    g_message = nullptr;
    return;
  }
  installed_ = true;
}

InterruptMessage::~InterruptMessage() {
  if (!installed_) return;
  ::sigaction(SIGINT, &g_previous, nullptr);
  g_length = 0;
  g_message = nullptr;
}

}  // namespace parity::sweep
