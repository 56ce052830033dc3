// <out_dir>/memory.json for `loom report`: every rank's memory by category (what is held at
// the end of the run and the peaks) next to the formulas' prediction (ZeRO model state,
// activations per layer), and the CPUs it could run on, gathered onto rank 0, which writes
// the file.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "loom/comm/process_group.hpp"
#include "loom/plan/memory_model.hpp"

namespace loom::train {

// This rank's record: {"rank", "name", "current": {category: bytes}, "peak": {...},
// "total_peak", "formula": {"params", "grads", "optimizer", "activations", "data", "gathered"},
// "data_held"}: data, the input data the model holds beside its batches (a GCN's graph; 0 for a
// GPT), predicted and measured (ModelSpec::data_bytes); gathered, what ZeRO-2/3's units hold whole
// at once (plan/zero_gathered.hpp), against the peak of the "gathered" category.
nlohmann::json memory_record(int rank, const std::string& name, const plan::StateBytes& state, int64_t activations,
                             int64_t data_predicted = 0, int64_t data_held = 0, int64_t gathered = 0);

// Collective over world: rank 0 writes {"ranks": [record, ...]} to path.
void write_memory_file(const std::string& path, comm::ProcessGroup& world, const nlohmann::json& mine);

}  // namespace loom::train
