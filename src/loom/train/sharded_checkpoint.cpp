#include "loom/train/sharded_checkpoint.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "loom/comm/byte_transport.hpp"
#include "loom/data/input_file.hpp"
#include "loom/data/output_file.hpp"
#include "loom/agreed_error.hpp"
#include "loom/error.hpp"
#include "loom/kernels/precision.hpp"
#include "loom/tensor/memory_tracker.hpp"
#include "loom/train/checkpoint.hpp"
#include "loom/train/memory_budget.hpp"
#include "loom/train/model_identity.hpp"

namespace loom::train {

namespace fs = std::filesystem;
using nlohmann::json;

// Every rank's string, on every rank.
std::vector<std::string> all_gather_strings(comm::ProcessGroup& world, const std::string& mine) {
  return comm::all_gather_bytes(world, mine);
}

namespace {

std::string attempt(const std::function<void()>& f) {  // "" or the error's message
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// Every rank learns whether any rank failed (error non-empty) and throws its message,
// naming the rank when there are several: the same AgreedError on every rank.
void agree(comm::ProcessGroup& world, const std::string& error) {
  const std::vector<std::string> errors = all_gather_strings(world, error);
  for (size_t r = 0; r < errors.size(); ++r)
    if (!errors[r].empty())
      throw AgreedError((errors.size() > 1 ? "rank " + std::to_string(r) + ": " : "") + errors[r], world.size());
}

std::string rank_file_name(int rank) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "rank-%05d.safetensors", rank);
  return buf;
}

uint32_t crc_of(const Tensor& t) { return crc32_of(crc32_of(0, nullptr, 0), t.raw(), t.nbytes()); }

// The size of a rank file the manifest of checkpoint dir names; loom::Error unless it is a
// regular file (a FIFO would block the reader, a directory has no bytes to check).
int64_t rank_file_size(const std::string& dir, const std::string& name) {
  const std::string file = (fs::path(dir) / name).string();
  check(data::file_kind(file) != "missing", "checkpoint '", dir, "' is missing its rank file '", name,
        "' (named by its manifest)");
  return data::check_input_file(file, "checkpoint '" + dir + "': rank file");
}

// What a save that finds a tensor missing says after naming it.
std::string unsaved_note(const std::string& run_dir) {
  return ": no rank's pieces hold it (a bug in this layout's checkpoint pieces); nothing was saved and the previous "
         "checkpoint of '" +
         run_dir + "' stays latest";
}

// The CRC-32 of each piece and of the whole file, from a rank file's parts: its head, then
// its tensors' bytes in the order of `names` (the file's).
void add_checksums(json& report, const std::vector<std::string>& names, const std::vector<std::string_view>& parts) {
  std::map<std::string, json*> by_name;
  for (json& p : report["pieces"]) by_name[p.at("name").get<std::string>()] = &p;
  check(parts.size() == names.size() + 1, "a rank file of ", names.size(), " tensors in ", parts.size(), " parts");
  uint32_t file_crc = crc32_of(0, nullptr, 0);
  int64_t bytes = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const auto n = static_cast<int64_t>(parts[i].size());
    if (i > 0) (*by_name.at(names[i - 1]))["crc32"] = crc32_of(crc32_of(0, nullptr, 0), parts[i].data(), n);
    file_crc = crc32_of(file_crc, parts[i].data(), n);
    bytes += n;
  }
  report["bytes"] = bytes;
  report["crc32"] = file_crc;
}

// save_sharded_checkpoint's collective half: the file's parts (none: a pure replica) and report from
// prepare_sharded_checkpoint, or the error it met.
std::string write_sharded_checkpoint(const std::string& run_dir, const std::vector<std::string_view>& parts,
                                     const json& prepared_report,
                                     const std::string& prepare_error, const CheckpointInfo& info,
                                     const CheckpointLayout& layout, int64_t keep, comm::ProcessGroup& world) {
  const int rank = world.rank();
  const std::string name = checkpoint_dir_name(info.step);
  const fs::path final_dir = fs::path(run_dir) / name, tmp_dir = fs::path(run_dir) / (name + ".tmp");
  // Rank 0 prepares an empty temporary directory; a crashed earlier attempt's is discarded.
  agree(world, rank != 0 ? "" : attempt([&] {
    fs::create_directories(run_dir);
    fs::remove_all(tmp_dir);
    fs::create_directory(tmp_dir);
  }));

  // Each rank writes its encoded file, and reports it (or its error) with the tensors its part
  // of the model has: rank 0 learns both from the one gather.
  json report = prepared_report;
  std::string error = prepare_error;
  if (error.empty() && !parts.empty()) {
    error = attempt([&] {
      write_file_atomically((tmp_dir / rank_file_name(rank)).string(), parts);  // fsynced
      report["file"] = rank_file_name(rank);
    });
  }
  const std::vector<std::string> reports = all_gather_strings(world, error.empty() ? report.dump() : "");
  // A refused save leaves nothing behind: every rank is done writing (the gather above), and
  // rank 0 removes what they wrote.
  auto agree_or_discard = [&](const std::string& e) {
    try {
      agree(world, e);
    } catch (...) {
      std::error_code ignored;
      if (rank == 0) fs::remove_all(tmp_dir, ignored);
      throw;
    }
  };
  agree_or_discard(error);

  // Rank 0: the manifest, last; then the directory becomes visible under its final name.
  agree_or_discard(rank != 0 ? "" : attempt([&] {
    Manifest m;
    m.layout = layout;
    m.info = info;
    StateShapes all_expected;
    for (size_t rank_of_report = 0; rank_of_report < reports.size(); ++rank_of_report) {
      const json r = json::parse(reports[rank_of_report]);
      merge_expected(all_expected, r.at("expected"), rank_of_report);
      if (!r.contains("file")) continue;
      const std::string file = r["file"].get<std::string>();
      m.files[file] = {r["bytes"].get<int64_t>(), r["crc32"].get<uint32_t>()};
      for (const json& p : r["pieces"]) {
        ManifestTensor& t = m.tensors[p["name"].get<std::string>()];
        t.shape = p["shape"].get<Shape>();
        t.pieces.push_back({file, p["name"].get<std::string>(), piece_layout_from_json(p, "rank file " + file),
                            p["crc32"].get<uint32_t>()});
      }
    }
    // What a loader will check, checked before anything is published: a layout whose
    // owners do not tile every tensor is a bug named here, not a checkpoint that fails later.
    // Tiling sees only the tensors some rank wrote; one that no rank's pieces hold (every
    // rank leaving it out alike) is found against what the ranks' models have.
    StateShapes held;
    for (const auto& [tensor_name, t] : m.tensors) held.emplace(tensor_name, t.shape);
    check_holds_every_tensor(held, all_expected, "the checkpoint being written for step " + std::to_string(info.step),
                             unsaved_note(run_dir));
    const std::string text = manifest_to_json(m);
    parse_manifest(text, "the manifest being written for step " + std::to_string(info.step));
    write_file_atomically((tmp_dir / kManifestName).string(), text);
    fs::remove_all(final_dir);  // the same step saved again
    fs::rename(tmp_dir, final_dir);
    sync_directory(run_dir);  // the rename is durable before `latest` names it
    publish_checkpoint(run_dir, name, keep);
  }));
  return final_dir.string();
}

}  // namespace

PreparedCheckpoint::PreparedCheckpoint(int64_t step, std::shared_ptr<const std::string> bytes,
                                       std::function<std::string(comm::ProcessGroup&)> write)
    : step_(step), bytes_(std::move(bytes)), write_(std::move(write)) {
  if (bytes_) MemoryTracker::instance().on_alloc(MemoryCategory::Other, this->bytes());
}

PreparedCheckpoint::~PreparedCheckpoint() {
  if (bytes_) MemoryTracker::instance().on_free(MemoryCategory::Other, bytes());
}

PreparedCheckpoint prepare_sharded_checkpoint(const std::string& run_dir, const std::vector<StatePiece>& pieces,
                                              const StateShapes& expected, const CheckpointInfo& info,
                                              const CheckpointLayout& layout, int64_t keep,
                                              std::shared_ptr<std::string> buffer) {
  // The pieces this rank alone holds, laid out as its file (copied into buffer when given), with
  // the report rank 0 learns them and the tensors its part of the model has from. The checksums
  // of the pieces and of the file are taken by write().
  auto report = std::make_shared<json>(json{{"expected", shapes_json(expected)}});
  auto file_parts = std::make_shared<TensorFileParts>();
  std::shared_ptr<const std::string> bytes;
  const std::string error = attempt([&] {
    TensorFile file;
    json listed = json::array();
    for (const StatePiece& p : pieces) {
      if (!p.owner) continue;
      check(p.data.numel() == p.layout.numel(), "piece of '", p.name, "' holds ", p.data.numel(), " elements, its layout ",
            p.layout.numel());
      check(file.tensors.emplace(p.name, p.data).second, "two pieces of '", p.name, "' on one rank");
      listed.push_back(piece_json(p));
    }
    if (file.tensors.empty()) return;  // a pure replica: nothing of its own
    file.metadata["loom.kind"] = "loom-checkpoint-shard";
    file.metadata["step"] = std::to_string(info.step);
    *file_parts = lay_out_tensor_file(file);  // the data's checksum: one pass
    if (buffer) {
      file_parts->copy_into(*buffer);
      bytes = buffer;
    }
    (*report)["pieces"] = listed;
  });
  auto write = [run_dir, info, layout, keep, report, file_parts, bytes, error](comm::ProcessGroup& world) {
    std::vector<std::string> names;
    for (const auto& [name, t] : file_parts->tensors) names.push_back(name);
    std::vector<std::string_view> parts;  // the copy's, or the tensors' where they lie
    if (bytes != nullptr) {
      size_t at = file_parts->head.size();
      parts.emplace_back(bytes->data(), at);
      for (const auto& [name, t] : file_parts->tensors) {
        parts.emplace_back(bytes->data() + at, static_cast<size_t>(t.nbytes()));
        at += static_cast<size_t>(t.nbytes());
      }
    } else if (!names.empty()) {
      parts = file_parts->views();
    }
    // An error here is agreed on like one met while laying out (no rank left in the gather).
    std::string met = error;
    if (met.empty() && !parts.empty()) met = attempt([&] { add_checksums(*report, names, parts); });
    return write_sharded_checkpoint(run_dir, parts, *report, met, info, layout, keep, world);
  };
  return PreparedCheckpoint(info.step, bytes, std::move(write));
}

std::string save_sharded_checkpoint(const std::string& run_dir, const std::vector<StatePiece>& pieces,
                                    const StateShapes& expected, const CheckpointInfo& info,
                                    const CheckpointLayout& layout, int64_t keep, comm::ProcessGroup& world) {
  return prepare_sharded_checkpoint(run_dir, pieces, expected, info, layout, keep).write(world);
}

void on_every_rank(comm::ProcessGroup& world, const std::function<void()>& f) { agree(world, attempt(f)); }

PreparedCheckpoint prepare_single_checkpoint(const std::string& run_dir, const std::map<std::string, Tensor>& tensors,
                                             const StateShapes& expected, const CheckpointInfo& info, int64_t keep,
                                             int rank, std::shared_ptr<std::string> buffer) {
  auto held = std::make_shared<StateShapes>();
  auto file_parts = std::make_shared<TensorFileParts>();
  std::shared_ptr<const std::string> bytes;
  std::string error;
  if (rank == 0) {
    for (const auto& [name, t] : tensors) held->emplace(name, t.shape());
    error = attempt([&] {
      if (buffer) {
        encode_checkpoint_file_into(tensors, info, *buffer);
        bytes = buffer;
      } else {
        *file_parts = lay_out_checkpoint_file(tensors, info);
      }
    });
  }
  const std::string expected_json = shapes_json(expected).dump();
  auto write = [run_dir, info, keep, held, file_parts, bytes, error, expected_json](comm::ProcessGroup& world) {
    // Rank 0 learns every rank's expected tensors (another stage's among them); the others
    // wait for its write, so none runs ahead of a checkpoint it may need to resume from.
    const std::vector<std::string> reports = all_gather_strings(world, expected_json);
    std::string path;
    on_every_rank(world, [&] {
      if (world.rank() != 0) return;
      check(error.empty(), error);
      StateShapes all_expected;
      for (size_t r = 0; r < reports.size(); ++r) merge_expected(all_expected, json::parse(reports[r]), r);
      check_holds_every_tensor(*held, all_expected, "the checkpoint being written for step " + std::to_string(info.step),
                               unsaved_note(run_dir));
      const std::vector<std::string_view> parts =
          bytes != nullptr ? std::vector<std::string_view>{*bytes} : file_parts->views();
      path = save_encoded_checkpoint(run_dir, parts, info.step, keep);
    });
    return path;
  };
  return PreparedCheckpoint(info.step, bytes, std::move(write));
}

std::string save_single_checkpoint(const std::string& run_dir, const std::map<std::string, Tensor>& tensors,
                                   const StateShapes& expected, const CheckpointInfo& info, int64_t keep,
                                   comm::ProcessGroup& world) {
  return prepare_single_checkpoint(run_dir, tensors, expected, info, keep, world.rank()).write(world);
}

CheckpointReader::CheckpointReader(const std::string& path) : path_(path) {
  sharded_ = fs::is_directory(path);
  const std::string file = fs::path(path).filename().string();
  if (sharded_) {
    manifest_ = read_manifest(path);
  } else {
    single_ = std::make_unique<TensorFileReader>(path);
    single_->verify_checksum();  // each tensor is read when a destination needs it
    manifest_.info = checkpoint_info_from(single_->metadata(), path);
    manifest_.files[file] = {static_cast<int64_t>(fs::file_size(path)), 0};
    for (const std::string& name : single_->names())
      manifest_.tensors[name] = {single_->shape(name), {{file, name, whole_piece(single_->shape(name)), 0}}};
  }
  // A checkpoint copied or renamed over another step's would resume at the wrong step.
  const int64_t named = checkpoint_step(file);
  check(named < 0 || named == manifest_.info.step, "checkpoint '", path, "' records step ", manifest_.info.step,
        ", its name says step ", named);
}

void CheckpointReader::verify_files() {
  if (!sharded_) return;  // its checksum verified on opening
  for (const auto& [name, f] : manifest_.files) verify_file(name);
}

void CheckpointReader::verify_file(const std::string& name) {
  const ManifestFile& f = manifest_.files.at(name);
  const std::string file = (fs::path(path_) / name).string();
  const int64_t size = rank_file_size(path_, name);
  check(size == f.bytes, "checkpoint '", path_, "': rank file '", name, "' is ", size, " bytes, the manifest says ",
        f.bytes, " (truncated or replaced)");
  std::ifstream in(file, std::ios::binary);
  uint32_t crc = 0;
  check(crc32_of_file(in, 0, static_cast<uint64_t>(f.bytes), crc), "checkpoint '", path_, "': rank file '", name,
        "' ended before the ", f.bytes, " bytes the manifest says (truncated or replaced)");
  check(crc == f.crc32, "checkpoint '", path_, "': rank file '", name, "' is corrupted (CRC-32 ", crc,
        ", the manifest recorded ", f.crc32, ")");
}

namespace {

// A healthy run never saves NaN or inf (training stops or skips a non-finite step), and
// weights holding one give NaN losses or empty samples without an error: refused on loading.
void check_finite(const Tensor& t, const std::string& path, const std::string& name) {
  if (t.dtype() != DType::F32) return;
  const float* x = t.f32();
  for (int64_t i = 0; i < t.numel(); ++i)
    if (!std::isfinite(x[i]))
      fail("checkpoint '", path, "': tensor '", name, "' holds a non-finite value (", x[i], " at element ", i,
           "): weights that diverged, or a damaged or edited file; it cannot be loaded");
}

}  // namespace

Tensor CheckpointReader::piece_data(const ManifestPiece& piece) {
  if (single_) {
    const Tensor t = single_->read(piece.key);
    check_finite(t, path_, piece.key);
    return t;
  }
  auto it = files_.find(piece.file);
  if (it == files_.end()) {
    // The whole file's CRC too, once: a flipped bit outside the pieces read (another rank's,
    // the optimizer's when sampling) is damage all the same.
    verify_file(piece.file);
    it = files_.emplace(piece.file, std::make_unique<TensorFileReader>((fs::path(path_) / piece.file).string())).first;
  }
  Tensor t = it->second->read(piece.key);
  check(t.dtype() == DType::F32 && t.numel() == piece.layout.numel(), "checkpoint '", path_, "': '", piece.key, "' in '",
        piece.file, "' holds ", t.numel(), " elements, the manifest says ", piece.layout.numel());
  const uint32_t crc = crc_of(t);
  check(crc == piece.crc32, "checkpoint '", path_, "': '", piece.key, "' in rank file '", piece.file,
        "' is corrupted (CRC-32 ", crc, ", the manifest recorded ", piece.crc32, ")");
  check_finite(t, path_, piece.key);
  return t;
}

void CheckpointReader::load_into(const std::vector<StatePiece>& destinations) {
  // Masters change outside the optimizer: no bf16 copy stays current, even if a piece fails
  // to load after others were written.
  kernels::weights_overwritten();
  for (const StatePiece& dst : destinations) {
    auto it = manifest_.tensors.find(dst.name);
    check(it != manifest_.tensors.end(), "checkpoint '", path_, "' has no tensor '", dst.name, "'");
    const ManifestTensor& t = it->second;
    const bool repadded = t.shape != dst.full_shape;  // a token table padded for another tp
    check(!repadded || repadding_fits(t.shape, dst.full_shape, dst.padded_past_row), "checkpoint '", path_,
          "': tensor '", dst.name, "' is ", shape_str(t.shape), ", the model expects ", shape_str(dst.full_shape));
    check(dst.data.numel() == dst.layout.numel(), "destination of '", dst.name, "' holds ", dst.data.numel(),
          " elements, its layout ", dst.layout.numel());
    Tensor out = dst.data;  // a view: loading writes the caller's storage
    if (repadded) out.zero_();  // padding rows the checkpoint lacks: zero, as in their weights and moments
    int64_t copied = 0;
    for (const ManifestPiece& piece : t.pieces) {
      if (overlap(t.shape, piece.layout, dst.full_shape, dst.layout).empty()) continue;  // never read what is not needed
      copied += copy_overlap(t.shape, piece.layout, piece_data(piece).f32(), dst.full_shape, dst.layout, out.f32());
    }
    // A padded piece's padding is in no checkpoint; nor are the padding rows past the stored ones.
    const int64_t needed = elements_in_tensor(dst.full_shape, dst.layout, shape_numel(t.shape));
    check(copied == needed, "checkpoint '", path_, "': the pieces of '", dst.name, "' cover ", copied, " of ", needed,
          " elements this rank needs");
  }
}

CheckpointInfo load_state(const std::string& path, const std::vector<StatePiece>& destinations,
                          const std::string& optimizer_name, const StateShapes& expected,
                          const PaddedRows& padded) {
  CheckpointReader reader(path);
  const CheckpointInfo& info = reader.info();
  bool wants_optimizer = false;
  for (const StatePiece& d : destinations) wants_optimizer |= d.name.rfind("optim.", 0) == 0;
  if (wants_optimizer) {
    check(info.optimizer == optimizer_name, "checkpoint '", path, "' was trained with optimizer '", info.optimizer,
          "', this run uses '", optimizer_name, "'");
    check(info.optimizer_steps >= 0, "checkpoint '", path, "' has no valid optimizer step count");
  }
  check_checkpoint_fits(reader, destinations, expected, padded);
  reader.load_into(destinations);
  return info;
}

void check_checkpoint_fits(const CheckpointReader& reader, const std::vector<StatePiece>& destinations,
                           const StateShapes& expected, const PaddedRows& padded) {
  const std::string what = "checkpoint '" + reader.path() + "'";
  StateShapes held;
  for (const auto& [name, t] : reader.manifest().tensors) held.emplace(name, t.shape);
  // Every tensor this rank needs, with the row its padding starts at (0: none): its pieces', and
  // through padded those of expected it loads nothing of (a ZeRO share holding none of the table).
  std::map<std::string, std::pair<Shape, int64_t>> wanted;
  for (const auto& [name, shape] : expected) {
    const auto p = padded.find(name);
    wanted[name] = {shape, p == padded.end() ? 0 : p->second};
  }
  for (const StatePiece& d : destinations) wanted[d.name] = {d.full_shape, d.padded_past_row};
  for (const auto& [name, want] : wanted) {  // a table padded for another tp: held as re-padded
    auto h = held.find(name);
    if (h == held.end() || h->second == want.first || !repadding_fits(h->second, want.first, want.second)) continue;
    check_token_table_is_its_checkpoints(reader.path(), reader.info(), h->second.at(0));
    h->second = want.first;
  }
  for (const StatePiece& d : destinations) {  // one missing is named below, with every other
    const auto h = held.find(d.name);
    if (h != held.end())
      check(h->second == d.full_shape, what, ": tensor '", d.name, "' is ", shape_str(h->second), ", the model expects ",
            shape_str(d.full_shape));
  }
  // Every tensor the model has, even one no destination asks for: a checkpoint without it
  // would leave its initial values in place without a word.
  check_holds_every_tensor(held, expected, what);
}

std::map<std::string, Tensor> read_full_state(CheckpointReader& reader) {
  // The manifest's shapes are input: bounded before they allocate.
  double bytes = 0.0;
  for (const auto& [name, t] : reader.manifest().tensors) {
    double n = 4.0;  // bytes per fp32 element
    for (const int64_t d : t.shape) n *= static_cast<double>(d);
    bytes += n;
  }
  check_fits_in_memory({bytes, 0.0}, 1, "checkpoint '" + reader.path() + "'", {});  // its tensors' bytes
  std::map<std::string, Tensor> out;
  std::vector<StatePiece> whole;
  for (const auto& [name, t] : reader.manifest().tensors) {
    Tensor full = Tensor::empty(t.shape);
    out.emplace(name, full);
    whole.push_back({name, t.shape, whole_piece(t.shape), full, true});
  }
  reader.load_into(whole);
  return out;
}

}  // namespace loom::train
