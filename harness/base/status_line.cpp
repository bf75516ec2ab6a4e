#include "harness/base/status_line.h"

#include <cmath>
#include <cstdio>
#include <ostream>

namespace parity {

std::string clock_text(double seconds) {
  const long s = std::lround(seconds);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  return buf;
}

StatusLine::StatusLine(std::ostream& out, bool terminal, std::function<std::string(double)> text)
    : out_(out),
      terminal_(terminal),
      text_(std::move(text)),
      start_(std::chrono::steady_clock::now()) {
  if (!terminal_) return;
  ticker_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!wake_.wait_for(lock, std::chrono::seconds(1), [this] { return stopped_; })) redraw();
  });
}

StatusLine::~StatusLine() { finish(Finish::erase); }

double StatusLine::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void StatusLine::redraw() { out_ << "\r\033[K" << text_(elapsed()) << std::flush; }

void StatusLine::update(const std::function<void(std::ostream& out)>& change) {
  std::lock_guard<std::mutex> lock(mutex_);
  const bool drawn = terminal_ && !stopped_;
  // The line goes first, so that the change's lines start at the margin.
  if (change) {
    if (drawn) out_ << "\r\033[K";
    change(out_);
  }
  if (drawn)
    redraw();
  else
    out_ << std::flush;
}

void StatusLine::finish(Finish how) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopped_) return;
    stopped_ = true;
    if (terminal_) out_ << (how == Finish::keep ? "\n" : "\r\033[K") << std::flush;
  }
  wake_.notify_all();
  if (ticker_.joinable()) ticker_.join();
}

}  // namespace parity
