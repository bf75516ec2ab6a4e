#pragma once
// A sweep's progress: on a terminal one line rewritten in place ("\r") with
// done/total, failures so far, elapsed time and ETA; otherwise (CI logs) one
// plain line per finished case. Thread-safe.
#include <chrono>
#include <iosfwd>
#include <mutex>
#include <string>

namespace parity::sweep {

class Progress {
 public:
  Progress(std::ostream& out, int total, bool terminal);
  // A case finished: its id, outcome and seconds.
  void finished(const std::string& id, const std::string& outcome, double seconds);
  // Ends the updating line (terminal mode) so later output starts on a fresh line.
  void done();
  double elapsed() const;

 private:
  std::ostream& out_;
  int total_, finished_ = 0, failures_ = 0;
  bool terminal_;
  std::chrono::steady_clock::time_point start_;
  std::mutex mutex_;
};

// "1:05" (m:ss), "1:02:03" past an hour.
std::string clock_text(double seconds);

}  // namespace parity::sweep
