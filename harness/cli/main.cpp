// The parity executable. The hidden worker subcommands come first: a
// processes-mode rank is this binary re-executed as `parity __rank-worker ...`.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "harness/cli/cli.h"
#include "harness/runtime/launcher.h"

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "__rank-worker") == 0)
    return parity::run_rank_worker(argc - 2, argv + 2);
  if (argc > 1 && std::strcmp(argv[1], "__agent-store") == 0) return parity::serve_agent_store();
  bool must_exit_now = false;
  const int code =
      parity::cli::run_command_line(argc, argv, std::cout, std::cerr, {}, &must_exit_now);
  if (must_exit_now) {
    std::cout.flush();
    std::cerr.flush();
    std::fflush(nullptr);
    std::_Exit(code);
  }
  return code;
}
