// Fuzz target: a checkpoint file (safetensors: header length, JSON header, offsets, data,
// CRC), then what `loom sample` and a resume read from its metadata: the stored config and
// the tokenizer spec.
#include <unistd.h>

#include <fstream>

#include "fuzz_target.hpp"
#include "loom/data/tokenizer.hpp"
#include "loom/train/config.hpp"
#include "loom/train/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/loom_fuzz_safetensors_" + std::to_string(::getpid()) + ".safetensors";
  return loom::fuzz::accept_or_loom_error(data, size, [](const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    const loom::train::TensorFile file = loom::train::load_tensor_file(path);
    if (auto it = file.metadata.find("tokenizer"); it != file.metadata.end()) loom::data::Tokenizer::from_spec(it->second);
    if (auto it = file.metadata.find("config"); it != file.metadata.end()) {
      loom::train::TrainConfig stored;
      loom::train::apply_toml_string(stored, it->second, "checkpoint");
    }
  });
}
