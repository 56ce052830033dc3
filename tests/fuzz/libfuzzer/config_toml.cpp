// Fuzz target: a configuration file (TOML) read over the defaults, validated and written back.
#include "fuzz_target.hpp"
#include "loom/train/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return loom::fuzz::accept_or_loom_error(data, size, [](const std::string& text) {
    loom::train::TrainConfig config;
    loom::train::apply_toml_string(config, text, "fuzz.toml");
    config.validate();
    loom::train::TrainConfig again;
    loom::train::apply_toml_string(again, loom::train::to_toml(config), "round trip");
  });
}
