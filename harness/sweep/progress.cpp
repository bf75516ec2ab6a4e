#include "harness/sweep/progress.h"

#include <cstdio>
#include <ostream>

namespace parity::sweep {

std::string clock_text(double seconds) {
  const long s = static_cast<long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  return buf;
}

Progress::Progress(std::ostream& out, int total, bool terminal)
    : out_(out), total_(total), terminal_(terminal), start_(std::chrono::steady_clock::now()) {
  if (!terminal_) return;
  ticker_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!wake_.wait_for(lock, std::chrono::seconds(1), [this] { return stopped_; })) redraw();
  });
}

Progress::~Progress() { done(); }

std::string Progress::counts() const {
  const double t = elapsed();
  const std::string eta = finished_ ? clock_text(t / finished_ * (total_ - finished_)) : "?";
  char text[160];
  std::snprintf(text, sizeof text, "[%d/%d] %d failed, elapsed %s, ETA %s", finished_, total_,
                failures_, clock_text(t).c_str(), eta.c_str());
  return text;
}

void Progress::redraw() { out_ << "\r\033[K" << counts() << std::flush; }

double Progress::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void Progress::finished(const std::string& id, const std::string& outcome, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++finished_;
  if (outcome != "passed") ++failures_;
  char took[32];
  std::snprintf(took, sizeof took, "%.2f s", seconds);
  if (!terminal_) {
    out_ << counts() << ": " << outcome << " " << took << "  " << id << std::endl;
    return;
  }
  // A failure gets a line of its own above the updating one.
  if (outcome != "passed") out_ << "\r\033[K" << outcome << " " << took << "  " << id << "\n";
  redraw();
}

void Progress::done() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopped_) return;
    stopped_ = true;
    if (terminal_) out_ << std::endl;
  }
  wake_.notify_all();
  if (ticker_.joinable()) ticker_.join();
}

}  // namespace parity::sweep
