#include "harness/sweep/progress.h"

#include <cstdio>
#include <ostream>

namespace parity::sweep {

Progress::Progress(std::ostream& out, int total, bool terminal)
    : total_(total), line_(out, terminal, [this](double t) { return counts(t); }) {}

Progress::~Progress() { done(); }

std::string Progress::counts(double t) const {
  const std::string eta = finished_ ? clock_text(t / finished_ * (total_ - finished_)) : "?";
  char text[160];
  std::snprintf(text, sizeof text, "[%d/%d] %d failed, elapsed %s, ETA %s", finished_, total_,
                failures_, clock_text(t).c_str(), eta.c_str());
  return text;
}

void Progress::finished(const std::string& id, const std::string& outcome, double seconds) {
  char took[32];
  std::snprintf(took, sizeof took, "%.2f s", seconds);
  line_.update([&](std::ostream& out) {
    ++finished_;
    if (outcome != "passed") ++failures_;
    if (!line_.terminal())
      out << counts(line_.elapsed()) << ": " << outcome << " " << took << "  " << id << "\n";
    else if (outcome != "passed")  // a failure gets a line of its own above the updating one
      out << outcome << " " << took << "  " << id << "\n";
  });
}

void Progress::done() { line_.finish(StatusLine::Finish::keep); }

}  // namespace parity::sweep
