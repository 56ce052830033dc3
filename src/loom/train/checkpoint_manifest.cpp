#include "loom/train/checkpoint_manifest.hpp"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "loom/data/input_file.hpp"
#include "loom/error.hpp"
#include "loom/train/config.hpp"

namespace loom::train {

namespace {

// A manifest lists pieces, never tensor data: anything larger is not one.
constexpr int64_t kMaxManifestBytes = int64_t{256} << 20;

using nlohmann::json;

json layout_json(const CheckpointLayout& l) {
  return {{"dp", l.dp},         {"pp", l.pp},         {"tp", l.tp},
          {"zero", l.zero},     {"chunks", l.chunks}, {"hsdp_shard", l.hsdp_shard},
          {"sequence_parallel", l.sequence_parallel}, {"tp_3d", l.tp_3d}};
}

// A CRC-32 as the writer stores it: an unsigned 32-bit integer. A JSON reader would wrap -1 or
// 2^32 into range, and a checksum that can never match must not pass for one.
uint32_t crc32_field(const json& value, const std::string& origin, const std::string& field) {
  check(value.is_number_unsigned() && value.get<uint64_t>() <= 0xffffffffu, origin, ": field '", field,
        "' is not a CRC-32 (an integer in 0..4294967295): ", value.dump());
  return value.get<uint32_t>();
}

}  // namespace

json slice_to_json(const nn::ShardSpec& spec) {
  json slice = {{"dim", spec.dim}, {"parts", spec.parts}, {"index", spec.index}, {"blocks", spec.blocks}};
  if (spec.dim2 >= 0 && spec.parts2 > 1) {
    slice["dim2"] = spec.dim2;
    slice["parts2"] = spec.parts2;
    slice["index2"] = spec.index2;
  }
  if (spec.pad > 0) slice["pad"] = spec.pad;  // zeros the pieces hold past the tensor's end
  if (spec.pad2 > 0) slice["pad2"] = spec.pad2;
  return slice;
}

nn::ShardSpec slice_from_json(const json& slice, const std::string& what) {
  nn::ShardSpec spec{slice.at("dim").get<int>(), slice.at("parts").get<int64_t>(), slice.at("index").get<int64_t>(),
                     slice.at("blocks").get<int64_t>()};
  if (slice.contains("pad")) spec.pad = slice.at("pad").get<int64_t>();
  if (slice.contains("pad2")) spec.pad2 = slice.at("pad2").get<int64_t>();
  const int given = static_cast<int>(slice.contains("dim2")) + static_cast<int>(slice.contains("parts2")) +
                    static_cast<int>(slice.contains("index2"));
  if (given == 0) return spec;
  // Half a second split read as none would load every piece's columns into the same place.
  check(given == 3, what, ": a second split needs dim2, parts2 and index2 together, got ", slice.dump());
  spec.dim2 = slice.at("dim2").get<int>();
  spec.parts2 = slice.at("parts2").get<int64_t>();
  spec.index2 = slice.at("index2").get<int64_t>();
  check(spec.dim2 >= 0, what, ": a second split along dim ", spec.dim2, " (dimensions count from 0)");
  return spec;
}

void check_file_name(const std::string& name, const std::string& origin) {
  const std::filesystem::path p(name);
  check(!name.empty() && !p.is_absolute() && name.find('/') == std::string::npos &&
            name.find('\\') == std::string::npos && name != "." && name != "..",
        origin, ": file '", name, "' is outside the checkpoint directory (rank files are plain names inside it)");
}

std::string manifest_to_json(const Manifest& m) {
  json files = json::object();
  for (const auto& [name, f] : m.files) files[name] = {{"bytes", f.bytes}, {"crc32", f.crc32}};
  json tensors = json::object();
  for (const auto& [name, t] : m.tensors) {
    json pieces = json::array();
    for (const ManifestPiece& p : t.pieces) {
      json piece = {{"file", p.file}, {"key", p.key}, {"begin", p.layout.begin}, {"end", p.layout.end}, {"crc32", p.crc32}};
      if (p.layout.spec.sharded()) piece["slice"] = slice_to_json(p.layout.spec);
      pieces.push_back(piece);
    }
    tensors[name] = {{"shape", t.shape}, {"pieces", pieces}};
  }
  const json out = {{"format", "loom-sharded-checkpoint"},
                    {"format_version", kManifestVersion},
                    {"layout", layout_json(m.layout)},
                    {"step", m.info.step},
                    {"optimizer", m.info.optimizer},
                    {"optimizer_steps", m.info.optimizer_steps},
                    {"config", m.info.config_toml},
                    {"tokenizer", m.info.tokenizer_spec},
                    {"files", files},
                    {"tensors", tensors}};
  return out.dump(1);
}

Manifest parse_manifest(const std::string& text, const std::string& origin) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail(origin, " is not valid JSON: ", e.what());
  }
  Manifest m;
  std::string field;  // named in the error when a field is missing or mistyped
  try {
    field = "format";
    check(j.at("format").get<std::string>() == "loom-sharded-checkpoint", origin, " is not a Loom checkpoint manifest");
    field = "format_version";
    const int64_t version = j.at("format_version").get<int64_t>();
    check(version == kManifestVersion, origin, " has format version ", version, "; this Loom reads version ",
          kManifestVersion);
    field = "layout";
    const json& l = j.at("layout");
    m.layout = {l.at("dp").get<int64_t>(),     l.at("pp").get<int64_t>(),     l.at("tp").get<int64_t>(),
                l.at("zero").get<int64_t>(),   l.at("chunks").get<int64_t>(), l.at("hsdp_shard").get<int64_t>(),
                l.at("sequence_parallel").get<bool>(), ""};
    if (l.contains("tp_3d")) {  // manifests written before 3D have none
      m.layout.tp_3d = l.at("tp_3d").get<std::string>();
      if (!m.layout.tp_3d.empty()) {
        try {
          parse_tp_3d_grid(m.layout.tp_3d);
        } catch (const Error& e) {
          fail(origin, ": invalid layout: ", e.what());
        }
      }
    }
    const CheckpointLayout& ml = m.layout;
    check(ml.dp >= 1 && ml.pp >= 1 && ml.tp >= 1 && ml.chunks >= 1 && ml.zero >= 0 && ml.zero <= 3 && ml.hsdp_shard >= 0,
          origin, ": invalid layout dp ", ml.dp, ", pp ", ml.pp, ", tp ", ml.tp, ", zero ", ml.zero, ", chunks ", ml.chunks,
          ", hsdp_shard ", ml.hsdp_shard);
    field = "step";
    m.info.step = j.at("step").get<int64_t>();
    check(m.info.step >= 0, origin, ": invalid step ", m.info.step);
    field = "optimizer";
    m.info.optimizer = j.at("optimizer").get<std::string>();
    field = "optimizer_steps";
    m.info.optimizer_steps = j.at("optimizer_steps").get<int64_t>();
    check(m.info.optimizer_steps >= -1, origin, ": invalid optimizer_steps ", m.info.optimizer_steps,
          " (-1: no optimizer state)");
    field = "config";
    m.info.config_toml = j.at("config").get<std::string>();
    field = "tokenizer";
    m.info.tokenizer_spec = j.at("tokenizer").get<std::string>();
    field = "files";
    for (const auto& [name, f] : j.at("files").items()) {
      field = "files." + name;
      check_file_name(name, origin);
      m.files[name] = {f.at("bytes").get<int64_t>(), crc32_field(f.at("crc32"), origin, "files." + name + ".crc32")};
    }
    field = "tensors";
    for (const auto& [name, t] : j.at("tensors").items()) {
      field = "tensors." + name;
      ManifestTensor& tensor = m.tensors[name];
      tensor.shape = t.at("shape").get<Shape>();
      for (const json& p : t.at("pieces")) {
        ManifestPiece piece;
        piece.file = p.at("file").get<std::string>();
        check_file_name(piece.file, origin);
        check(m.files.count(piece.file) != 0, origin, ": tensor '", name, "' has a piece in '", piece.file,
              "', which the manifest does not list");
        piece.key = p.at("key").get<std::string>();
        piece.layout.begin = p.at("begin").get<int64_t>();
        piece.layout.end = p.at("end").get<int64_t>();
        piece.crc32 = crc32_field(p.at("crc32"), origin, field + ".crc32");
        if (p.contains("slice")) piece.layout.spec = slice_from_json(p.at("slice"), origin + ": tensor '" + name + "'");
        check_piece(tensor.shape, piece.layout, origin + ": tensor '" + name + "'");
        check(piece.layout.numel() * static_cast<int64_t>(sizeof(float)) <= m.files[piece.file].bytes, origin,
              ": tensor '", name, "' has a piece larger than its file '", piece.file, "'");
        tensor.pieces.push_back(std::move(piece));
      }
    }
  } catch (const json::exception& e) {
    fail(origin, ": missing or invalid field '", field, "': ", e.what());
  }
  for (const auto& [name, t] : m.tensors) {
    std::vector<PieceLayout> layouts;
    for (const ManifestPiece& p : t.pieces) layouts.push_back(p.layout);
    try {
      check_tiling(name, t.shape, layouts);
    } catch (const Error& e) {
      fail(origin, ": the pieces do not cover the tensor exactly: ", e.what());
    }
  }
  return m;
}

Manifest read_manifest(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / kManifestName).string();
  check(data::file_kind(path) != "missing", "checkpoint '", dir, "' has no ", kManifestName,
        " (an incomplete checkpoint: its writer did not finish); it cannot be loaded");
  data::check_input_file(path, "manifest", kMaxManifestBytes);
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return parse_manifest(text.str(), "manifest '" + path + "'");
}

}  // namespace loom::train
