// Runs the `loom` binary as a user would, capturing what it prints (stdout and stderr) and
// its exit status: the end-to-end tests of the command line share it.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace loom::testing {

struct LoomRun {
  int exit_code;
  std::string output;  // stdout and stderr
};

inline LoomRun run_loom(const std::string& args) {
  const std::string cmd = std::string(LOOM_BINARY) + " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf{};
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

}  // namespace loom::testing
