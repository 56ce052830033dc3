// Fuzz target: a sharded checkpoint's manifest.json, parsed and written back.
#include "fuzz_target.hpp"
#include "loom/train/checkpoint_manifest.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return loom::fuzz::accept_or_loom_error(data, size, [](const std::string& text) {
    const loom::train::Manifest m = loom::train::parse_manifest(text, "fuzz/manifest.json");
    loom::train::parse_manifest(loom::train::manifest_to_json(m), "round trip");
  });
}
