// The manifest of a sharded checkpoint (manifest.json, written last): format version, the
// layout that wrote it, step, optimizer, configuration and tokenizer, every rank file with
// its size and CRC-32, and for every logical tensor its full shape and the pieces that
// tile it (file, key, slice, element range, CRC-32; a 3D-parallel weight's slice splits it
// twice, rows then columns, both recorded). A manifest is hostile input: parsing checks
// every field, keeps files inside the checkpoint directory and checks that each tensor's
// pieces tile it exactly, so a manifest that loads is one the loader can trust.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "loom/train/checkpoint_info.hpp"
#include "loom/train/reshard.hpp"

namespace loom::train {

inline constexpr int64_t kManifestVersion = 1;
inline constexpr const char* kManifestName = "manifest.json";

struct CheckpointLayout {
  int64_t dp = 1, pp = 1, tp = 1, zero = 0, chunks = 1, hsdp_shard = 0;
  bool sequence_parallel = false;
  std::string tp_3d;  // the 3D grid "R,C,D"; "" = none (and in manifests written before 3D)
};

struct ManifestPiece {
  std::string file;  // a rank file in the checkpoint directory
  std::string key;   // the tensor's name inside that file
  PieceLayout layout;
  uint32_t crc32 = 0;  // of the piece's bytes
};

struct ManifestTensor {
  Shape shape;  // the full (serial-layout) shape
  std::vector<ManifestPiece> pieces;
};

struct ManifestFile {
  int64_t bytes = 0;
  uint32_t crc32 = 0;  // of the whole file
};

struct Manifest {
  CheckpointLayout layout;
  CheckpointInfo info;
  std::map<std::string, ManifestFile> files;
  std::map<std::string, ManifestTensor> tensors;
};

std::string manifest_to_json(const Manifest& manifest);
// Throws loom::Error naming origin and the problem: malformed JSON, a missing or mistyped
// field, another format version, a file outside the directory, a piece outside its tensor
// or naming an unlisted file, a tensor its pieces do not tile.
Manifest parse_manifest(const std::string& text, const std::string& origin);
// <dir>/manifest.json; a directory without one is an incomplete checkpoint (an error).
Manifest read_manifest(const std::string& dir);
// A piece's tensor-parallel slice as a manifest records it: dim, parts, index, blocks, and
// for a second split dim2, parts2, index2. Reading checks the fields' types and that a
// second split is given whole (dim2 >= 0 with parts2 and index2); whether the slice fits
// its tensor is check_piece's.
nlohmann::json slice_to_json(const nn::ShardSpec& spec);
nn::ShardSpec slice_from_json(const nlohmann::json& slice, const std::string& what);
// Rejects absolute paths, "..", separators: a rank file is a plain name in the directory.
void check_file_name(const std::string& name, const std::string& origin);

}  // namespace loom::train
