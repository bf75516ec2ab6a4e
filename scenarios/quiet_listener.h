#pragma once
// A rapidcheck listener that reports nothing: for searches whose outcome the
// caller prints itself (parity mutants' table, the suite's "it catches the
// fault" tests), so neither per-case progress nor rapidcheck's exit note
// ("Some of your RapidCheck properties had failures") appears for a failure
// that was expected.
#include <sstream>
#include <string>
#include <utility>

#include <rapidcheck.h>

namespace parity::scenarios {

struct QuietListener : rc::detail::TestListener {
  void onTestCaseFinished(const rc::detail::CaseDescription&) override {}
  void onShrinkTried(const rc::detail::CaseDescription&, bool) override {}
  void onTestFinished(const rc::detail::TestMetadata&, const rc::detail::TestResult&) override {}
};

// A rapidcheck search whose failure is the point (a "the property catches the
// fault" test): runs `property` quietly with RC_PARAMS's settings (or `params`).
struct QuietSearch {
  bool failed = false;
  std::string message;  // rapidcheck's result text: the shrunk case, the reproduce string
};
template <typename Property>
QuietSearch search_quietly(
    const std::string& id, Property&& property,
    const rc::detail::TestParams& params = rc::detail::configuration().testParams) {
  rc::detail::TestMetadata metadata;
  metadata.id = id;
  metadata.description = id;
  QuietListener listener;
  const rc::detail::TestResult result = rc::detail::checkProperty(
      rc::detail::toProperty(std::forward<Property>(property)), metadata, params, listener);
  std::ostringstream message;
  rc::detail::printResultMessage(result, message);
  return {result.template is<rc::detail::FailureResult>(), message.str()};
}

}  // namespace parity::scenarios
