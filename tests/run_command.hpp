// Runs a shell command for the end-to-end tests (the loom binary, mpirun, chromium) and
// returns its exit code and everything it printed on stdout and stderr.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace loom::testing {

struct CommandResult {
  int exit_code;
  std::string output;  // stdout and stderr
};

inline CommandResult run_command(const std::string& command) {
  const std::string cmd = command + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return {127, "popen failed for: " + command};
  std::string out;
  std::array<char, 4096> buf{};
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

// The loom binary with these arguments, as a user would start it.
inline CommandResult run_loom(const std::string& args) { return run_command(std::string(LOOM_BINARY) + " " + args); }

// `mpirun` as the tests start it: oversubscribed (2 cores), as root in CI containers.
inline std::string mpirun(int ranks) {
  return "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1 " +
         std::string(LOOM_MPIEXEC) + " --oversubscribe --bind-to none -n " + std::to_string(ranks) + " ";
}

}  // namespace loom::testing
