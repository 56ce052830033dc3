// `resume = "auto"`: the newest checkpoint of a run directory that loads completely (header,
// every tensor and the checksum verified), so a restarted job skips a file a crash or a full
// disk left damaged instead of stopping on it. Temporary files of unfinished writes are
// never candidates: only complete files carry the checkpoint-<step>.safetensors name.
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
