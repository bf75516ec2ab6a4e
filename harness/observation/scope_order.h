#pragma once
// The out-of-order check every per-thread RAII scope shares. A scope saves the
// value it overwrites and puts it back on exit; destroyed while a later scope of
// the same field is still alive (a heap- or optional-held scope reset early) it
// would put back a value that points into a dead scope. Each scope therefore
// records itself as its field's owner and, on exit, checks it still is.
#include <string_view>

namespace parity::detail {

// Prints "parity: <scope> destroyed out of order ..." to stderr and aborts (a
// destructor cannot throw, and continuing would leave a dangling observer).
[[noreturn]] void scope_destroyed_out_of_order(std::string_view scope);

}  // namespace parity::detail
