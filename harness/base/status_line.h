#pragma once
// A progress line for a terminal: one line rewritten in place ("\r", erase
// line) with whatever `text` says, redrawn after every update() and once a
// second (so an elapsed time moves during a long stretch without updates).
// Whole lines written through update() appear above it. Not on a terminal (a
// CI log, a pipe) there is no line: update() writes its lines and nothing
// else. Thread-safe: `text` and every update's `change` run under one lock.
// parity sweep, parity run and parity check show their progress with it.
#include <chrono>
#include <condition_variable>
#include <functional>
#include <iosfwd>
#include <mutex>
#include <string>
#include <thread>

namespace parity {

class StatusLine {
 public:
  // text(elapsed seconds since construction): the line, without "\r" or "\n".
  StatusLine(std::ostream& out, bool terminal, std::function<std::string(double)> text);
  ~StatusLine();  // finish(Finish::erase)
  StatusLine(const StatusLine&) = delete;
  StatusLine& operator=(const StatusLine&) = delete;

  bool terminal() const { return terminal_; }
  double elapsed() const;
  // Runs `change` under the lock with the stream to write whole lines to
  // (they end up above the line), then redraws the line (terminal) and flushes.
  // After finish(), `change` still runs and no line is drawn.
  void update(const std::function<void(std::ostream& out)>& change = {});

  enum class Finish { keep, erase };
  // Stops the redrawing and ends the line, so later output starts on a fresh
  // one: keep leaves the last state visible (a newline), erase removes it.
  // Idempotent; nothing is written when not on a terminal.
  void finish(Finish how);

 private:
  std::ostream& out_;
  bool terminal_;
  std::function<std::string(double)> text_;
  std::chrono::steady_clock::time_point start_;
  bool stopped_ = false;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::thread ticker_;

  void redraw();  // mutex_ held
};

// "1:05" (m:ss), "1:02:03" past an hour.
std::string clock_text(double seconds);

}  // namespace parity
