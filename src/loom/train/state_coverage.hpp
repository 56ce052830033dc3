// The state a checkpoint carries, piece by piece, and the checks that no tensor of it is
// lost: every rank holds pieces of the logical (serial-layout) model and optimizer state;
// the pieces their owners write must together tile every tensor of the state, on saving
// (else the checkpoint lacks it) and on resuming (else a tensor keeps its initial values
// without a word). A layout whose pieces leave a tensor out is a bug in Loom; these checks
// turn it into an error naming the tensor.
#pragma once

#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "loom/comm/process_group.hpp"
#include "loom/tensor/tensor.hpp"
#include "loom/train/reshard.hpp"

namespace loom::train {

// One piece of this rank's state: what it writes (when owner) and where a load puts it.
struct StatePiece {
  std::string name;    // "model.<param>" or "optim.<kind>.<param>"
  Shape full_shape;    // the logical tensor's
  PieceLayout layout;  // which of its elements this piece holds
  Tensor data;         // a view of this rank's storage, layout.numel() elements
  bool owner = true;   // the one holder of these elements that writes them (no replica does)
  int64_t padded_past_row = 0;  // Parameter::padded_past_row(): a checkpoint may hold more or fewer rows
};

// The tensors of the serial model and optimizer state ("model.<param>",
// "optim.<kind>.<param>") and their full shapes: what a checkpoint must hold. Each rank
// names those of its own part of the model, derived from its parameters and the
// optimizer's state kinds, never from its pieces, so pieces can be checked against it.
using StateShapes = std::map<std::string, Shape>;

// The tensors of a StateShapes whose rows from some row on are padding (the token table and its
// moments: Parameter::padded_past_row), with that row. A checkpoint may hold more or fewer of
// those rows (padded for another tp), even one this rank loads nothing of (a ZeRO rank whose
// shard holds none of the table): it is re-padded on the ranks that load it.
using PaddedRows = std::map<std::string, int64_t>;

// loom::Error unless held has every tensor of expected with its shape: "<what> has no tensor
// '<name>' <shape>..." (the first few missing, and how many) followed by note.
void check_holds_every_tensor(const StateShapes& held, const StateShapes& expected, const std::string& what,
                              const std::string& note = "");

// StateShapes as JSON ({"name": shape}), as ranks send them to each other; merge_expected
// adds one rank's to all: loom::Error when two ranks give one tensor two shapes (a bug).
nlohmann::json shapes_json(const StateShapes& shapes);
void merge_expected(StateShapes& all, const nlohmann::json& rank_shapes, size_t rank);

// A piece as ranks report it: name, full shape, element range and slice; and back.
nlohmann::json piece_json(const StatePiece& piece);
PieceLayout piece_layout_from_json(const nlohmann::json& piece, const std::string& what);

// Collective over world: loom::Error on every rank (naming `what`, then the tensor and the
// elements) unless the owner pieces of all ranks tile every tensor any rank expects.
// A resume checks it before loading: what no owner piece loads would stay at its
// initial values on that rank.
void check_owners_tile_state(const std::vector<StatePiece>& pieces, const StateShapes& expected,
                             const std::string& what, comm::ProcessGroup& world);

}  // namespace loom::train
