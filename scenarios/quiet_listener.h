#pragma once
// A rapidcheck listener that reports nothing: for searches whose outcome the
// caller prints itself (parity mutants' table, the suite's "it catches the
// fault" tests), so neither per-case progress nor rapidcheck's exit note
// ("Some of your RapidCheck properties had failures") appears for a failure
// that was expected.
#include <rapidcheck.h>

namespace parity::scenarios {

struct QuietListener : rc::detail::TestListener {
  void onTestCaseFinished(const rc::detail::CaseDescription&) override {}
  void onShrinkTried(const rc::detail::CaseDescription&, bool) override {}
  void onTestFinished(const rc::detail::TestMetadata&, const rc::detail::TestResult&) override {}
};

}  // namespace parity::scenarios
