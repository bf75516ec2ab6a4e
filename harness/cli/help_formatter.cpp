#include "harness/cli/help_formatter.h"

#include <sstream>

#include <CLI/CLI.hpp>

namespace parity::cli {
namespace {

class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_option_name(const CLI::Option* opt, bool is_positional) const override {
    if (is_positional) return opt->get_name(true, false);
    std::string names;
    for (const std::string& s : opt->get_snames()) names += (names.empty() ? "-" : ", -") + s;
    for (const std::string& l : opt->get_lnames()) names += (names.empty() ? "--" : ", --") + l;
    return names;
  }

  std::string make_option_opts(const CLI::Option* opt) const override {
    std::ostringstream out;
    if (opt->get_type_size() != 0) {
      if (!opt->get_type_name().empty()) out << " " << opt->get_type_name();
      if (opt->get_expected_max() == CLI::detail::expected_max_vector_size) out << " ...";
      if (opt->get_required()) out << " REQUIRED";
    }
    return out.str();
  }

  std::string make_option_desc(const CLI::Option* opt) const override {
    const std::string& shown = opt->get_default_str();
    if (shown.empty()) return opt->get_description();
    return opt->get_description() + " (default: " + shown + ")";
  }
};

}  // namespace

std::shared_ptr<CLI::Formatter> make_help_formatter() {
  auto f = std::make_shared<HelpFormatter>();
  f->column_width(36);
  return f;
}

}  // namespace parity::cli
