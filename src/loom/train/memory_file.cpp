#include "loom/train/memory_file.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "loom/comm/byte_transport.hpp"
#include "loom/error.hpp"
#include "loom/tensor/memory_tracker.hpp"
#include "loom/train/safetensors.hpp"
#include "loom/train/sharded_checkpoint.hpp"

namespace loom::train {

nlohmann::json memory_record(int rank, const std::string& name, const plan::StateBytes& state, int64_t activations,
                             int64_t data_predicted, int64_t data_held, int64_t gathered) {
  const MemorySnapshot m = MemoryTracker::instance().snapshot();
  nlohmann::json current, peak;
  for (int c = 0; c < kMemoryCategoryCount; ++c) {
    const std::string key(category_name(static_cast<MemoryCategory>(c)));
    current[key] = m.current[static_cast<size_t>(c)];
    peak[key] = m.peak[static_cast<size_t>(c)];
  }
  return {{"rank", rank},
          {"name", name},
          {"current", current},
          {"peak", peak},
          {"total_peak", m.total_peak},
          {"formula",
           {{"params", state.params}, {"grads", state.grads}, {"optimizer", state.optimizer},
            {"activations", activations}, {"data", data_predicted}, {"gathered", gathered}}},
          {"data_held", data_held}};
}

void write_memory_file(const std::string& path, comm::ProcessGroup& world, const nlohmann::json& mine) {
  const std::vector<std::string> all =
      comm::gather_bytes(world, mine.dump());
  // Rank 0 writes; a failure (a full disk) stops every rank, not rank 0 alone.
  on_every_rank(world, [&] {
    if (world.rank() != 0) return;
    nlohmann::json file{{"ranks", nlohmann::json::array()}};
    for (const std::string& text : all) file["ranks"].push_back(nlohmann::json::parse(text));
    write_file_atomically(path, file.dump(1) + "\n");  // a kill leaves the previous file, not a cut one
  });
}

}  // namespace loom::train
