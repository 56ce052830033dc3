// `resume = "auto"`: the newest checkpoint of a run directory that loads completely (header,
// every tensor and the checksum verified; of a sharded one the manifest and every piece), so
// a restarted job skips a checkpoint a crash or a full disk left damaged instead of stopping
// on it. Unfinished writes (".tmp") are never candidates; a sharded directory without its
// manifest fails to load and is skipped.
#pragma once

#include <string>
#include <vector>

namespace loom::train {

struct AutoResume {
  std::string path;                  // "" when the directory holds no complete checkpoint
  std::vector<std::string> skipped;  // newer files that failed to load, each with its error
};

AutoResume find_newest_complete_checkpoint(const std::string& dir);

}  // namespace loom::train
