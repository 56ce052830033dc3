// Ranks agree before they talk: every rank of a job must run the same binary on the same
// resolved configuration (hence the same layout and model); ranks that do not would call
// collectives of different sizes and corrupt memory or hang. A fixed-size collective (each
// rank's 64-bit digest) decides; only when digests differ are the texts gathered, to name
// the ranks and the keys that differ.
#pragma once

#include <string>
#include <vector>

#include "loom/comm/process_group.hpp"
#include "loom/train/config.hpp"

namespace loom::train {

// This binary's identity: its version (git describe at configure time) and compiler.
const std::string& build_id();

// What ranks must agree on: the resolved configuration as TOML, the vocabulary, the build.
std::string agreement_text(const TrainConfig& config);

// The keys on which ranks' agreement texts differ, one line each, as "ranks 0 and 2 have
// n_layer = 2, rank 1 has n_layer = 4" (none when they agree).
std::vector<std::string> disagreements(const std::vector<std::string>& texts);

// Collective over world, the first one of a run: loom::Error on every rank naming the ranks
// and the keys that differ, unless every rank holds the same agreement text.
void check_ranks_agree(const TrainConfig& config, comm::ProcessGroup& world);

}  // namespace loom::train
