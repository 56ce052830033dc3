// Fuzz target: command-line flag values. The first byte picks the key of the schema, the
// rest is the flag's text; then the whole config is validated.
#include "fuzz_target.hpp"
#include "loom/train/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return loom::fuzz::accept_or_loom_error(data, size, [](const std::string& input) {
    if (input.empty()) return;
    loom::train::TrainConfig config;
    const auto schema = loom::train::config_schema(config);
    const auto& key = schema[static_cast<unsigned char>(input[0]) % schema.size()];
    loom::train::set_from_string(key, input.substr(1));
    config.validate();
  });
}
