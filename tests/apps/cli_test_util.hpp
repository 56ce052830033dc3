// What the CLI tests share: a tiny model's flags, temporary paths, and the check that bad
// input gives its message and exit status 1 (never a crash, a hang or an internal error).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "run_command.hpp"

namespace loom::testing {

inline std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("loom_cli_" + name)).string();
}

inline const std::string kTiny =
    "--n-layer 1 --n-head 2 --n-embd 16 --block-size 16 --batch-size 2 --threads 1 --peak-gflops 100 "
    "--data " LOOM_SOURCE_DIR "/data/tinyshakespeare.txt";

// Input that could block or run for long (a FIFO, a device) is given 30 s: a hang fails the
// test with exit status 124 instead of stalling the suite.
inline void expect_error(const std::string& args, const std::string& message) {
  const CommandResult r = run_command("timeout 30 " + std::string(LOOM_BINARY) + " " + args);
  EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.output;
  EXPECT_NE(r.output.find(message), std::string::npos) << "loom " << args << " printed:\n" << r.output;
  EXPECT_EQ(r.output.find("terminate"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("internal error"), std::string::npos) << r.output;
}

}  // namespace loom::testing
