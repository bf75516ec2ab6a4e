#pragma once
// A sweep's progress: on a terminal one line rewritten in place ("\r") with
// done/total, failures so far, elapsed time and ETA; otherwise (CI logs) one
// plain line per finished case. On a terminal the line is also redrawn every
// second, so elapsed time moves during a long case. Thread-safe.
#include <chrono>
#include <condition_variable>
#include <iosfwd>
#include <mutex>
#include <string>
#include <thread>

namespace parity::sweep {

class Progress {
 public:
  Progress(std::ostream& out, int total, bool terminal);
  ~Progress();  // done()
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  // A case finished: its id, outcome and seconds.
  void finished(const std::string& id, const std::string& outcome, double seconds);
  // Stops the redrawing and ends the updating line (terminal mode), so later
  // output starts on a fresh line. Idempotent.
  void done();
  double elapsed() const;

 private:
  std::ostream& out_;
  int total_, finished_ = 0, failures_ = 0;
  bool terminal_;
  bool stopped_ = false;
  std::chrono::steady_clock::time_point start_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::thread ticker_;

  std::string counts() const;  // "[3/64] 1 failed, elapsed 0:12, ETA 4:05"; mutex_ held
  void redraw();               // the updating line; mutex_ held
};

// "1:05" (m:ss), "1:02:03" past an hour.
std::string clock_text(double seconds);

}  // namespace parity::sweep
