#include "loom/train/state_coverage.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "loom/comm/byte_transport.hpp"
#include "loom/error.hpp"
#include "loom/train/checkpoint_manifest.hpp"

namespace loom::train {

using nlohmann::json;

void check_holds_every_tensor(const StateShapes& held, const StateShapes& expected, const std::string& what,
                              const std::string& note) {
  std::vector<std::string> missing;
  for (const auto& [name, shape] : expected) {
    const auto it = held.find(name);
    if (it == held.end()) {
      missing.push_back("'" + name + "' " + shape_str(shape));
      continue;
    }
    check(it->second == shape, what, ": tensor '", name, "' is ", shape_str(it->second), ", the model expects ",
          shape_str(shape), note);
  }
  if (missing.empty()) return;
  constexpr size_t kShown = 4;
  std::string list;
  for (size_t i = 0; i < std::min(missing.size(), kShown); ++i) list += (i > 0 ? ", " : "") + missing[i];
  if (missing.size() > kShown) list += " and " + std::to_string(missing.size() - kShown) + " more";
  fail(what, " has no tensor ", list, " (", missing.size(), " of the ", expected.size(),
       " tensors of the model and optimizer state)", note);
}

json shapes_json(const StateShapes& shapes) {
  json out = json::object();
  for (const auto& [name, shape] : shapes) out[name] = shape;
  return out;
}

void merge_expected(StateShapes& all, const json& rank_shapes, size_t rank) {
  for (const auto& [name, shape] : rank_shapes.items()) {
    const auto [it, added] = all.emplace(name, shape.get<Shape>());
    check(added || it->second == shape.get<Shape>(), "rank ", rank, " has tensor '", name, "' as ",
          shape_str(shape.get<Shape>()), ", an earlier rank as ", shape_str(it->second));
  }
}

json piece_json(const StatePiece& p) {
  json piece = {{"name", p.name}, {"shape", p.full_shape}, {"begin", p.layout.begin}, {"end", p.layout.end}};
  if (p.layout.spec.sharded()) piece["slice"] = slice_to_json(p.layout.spec);
  return piece;
}

PieceLayout piece_layout_from_json(const json& p, const std::string& what) {
  PieceLayout layout;
  layout.begin = p["begin"].get<int64_t>();
  layout.end = p["end"].get<int64_t>();
  if (p.contains("slice")) layout.spec = slice_from_json(p["slice"], what);
  return layout;
}

void check_owners_tile_state(const std::vector<StatePiece>& pieces, const StateShapes& expected,
                             const std::string& what, comm::ProcessGroup& world) {
  json owned = json::array();
  for (const StatePiece& p : pieces) {
    if (p.owner) owned.push_back(piece_json(p));
  }
  const json mine = {{"expected", shapes_json(expected)}, {"owned", owned}};
  const std::vector<std::string> reports = comm::all_gather_bytes(world, mine.dump());
  // Every rank checks the same lists alike, so every rank throws the same error.
  StateShapes all_expected;
  std::map<std::string, std::pair<Shape, std::vector<PieceLayout>>> tensors;
  for (size_t rank = 0; rank < reports.size(); ++rank) {
    const json report = json::parse(reports[rank]);
    merge_expected(all_expected, report["expected"], rank);
    for (const json& p : report["owned"]) {
      auto& [shape, layouts] = tensors[p["name"].get<std::string>()];
      shape = p["shape"].get<Shape>();
      layouts.push_back(piece_layout_from_json(p, what));
    }
  }
  const std::string consequence = "; the elements no piece loads would keep their initial values";
  StateShapes held;
  for (const auto& [name, t] : tensors) held.emplace(name, t.first);
  check_holds_every_tensor(held, all_expected, what,
                           ": no rank's pieces load it (a bug in this layout's checkpoint pieces)" + consequence);
  for (const auto& [name, t] : tensors) {
    try {
      check_tiling(name, t.first, t.second);
    } catch (const Error& e) {
      fail(what, ": the pieces this layout loads do not cover ", e.what(), " (a bug in its checkpoint pieces)",
           consequence);
    }
  }
}

}  // namespace loom::train
