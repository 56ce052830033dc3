// What a coverage-guided fuzz target of Loom's readers may do with an input: load it or
// throw loom::Error. Any other exception escapes LLVMFuzzerTestOneInput and libFuzzer
// reports it as a crash, as it does a sanitizer report, a timeout or running out of memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "loom/error.hpp"

namespace loom::fuzz {

template <class F>
int accept_or_loom_error(const uint8_t* data, size_t size, F&& read) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  try {
    read(input);
  } catch (const loom::Error&) {
  }
  return 0;
}

}  // namespace loom::fuzz
