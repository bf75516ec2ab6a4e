#pragma once
// parity's --help layout on top of CLI11's: an option shows its names
// (`--sp, --no-sp`, without CLI11's `{false}` marks), its value's type from the
// field table (INT, FLOAT, FILE, {a,b}) and its default at the end of its
// description ("(default: 2)"), so the help is generated from the same table
// as the flags and cannot drift from them.
#include <memory>

namespace CLI {
class Formatter;
}  // namespace CLI

namespace parity::cli {

std::shared_ptr<CLI::Formatter> make_help_formatter();

}  // namespace parity::cli
