#pragma once
// A sweep's progress: on a terminal one updating line (harness/base/status_line.h)
// with done/total, failures so far, elapsed time and ETA, each failed case on a
// line of its own above it; otherwise (CI logs) one plain line per finished
// case. Thread-safe.
#include <iosfwd>
#include <string>

#include "harness/base/status_line.h"

namespace parity::sweep {

class Progress {
 public:
  Progress(std::ostream& out, int total, bool terminal);
  ~Progress();  // done()
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  // A case finished: its id, outcome and seconds.
  void finished(const std::string& id, const std::string& outcome, double seconds);
  // Stops the redrawing and ends the updating line (terminal mode: its last
  // state stays), so later output starts on a fresh line. Idempotent.
  void done();
  double elapsed() const { return line_.elapsed(); }

 private:
  int total_, finished_ = 0, failures_ = 0;  // under line_'s lock
  StatusLine line_;                          // last: it reads the counts until it is gone

  std::string counts(double t) const;  // "[3/64] 1 failed, elapsed 0:12, ETA 4:05"
};

}  // namespace parity::sweep
