#include "loom/parallel/pipeline/schedule_check.hpp"

#include <map>
#include <set>
#include <string>
#include <tuple>

#include "loom/error.hpp"
#include "loom/parallel/pipeline/timeline.hpp"

namespace loom::parallel::pipeline {

namespace {

// Where each action of one rank sits in its list, by (kind, micro-batch, chunk).
using Index = std::map<std::tuple<ActionKind, int, int>, size_t>;

std::string chunk_text(const Schedule& s, int chunk) {
  return s.chunks > 1 ? " (chunk " + std::to_string(chunk) + ")" : "";
}

std::string payload(ActionKind kind) {
  return kind == ActionKind::SendActivation || kind == ActionKind::RecvActivation ? "activation" : "gradient";
}

void check_sizes_and_ranges(const Schedule& s) {
  check(s.pp >= 1 && s.micro_batches >= 1 && s.chunks >= 1, "a pipeline schedule needs pp, micro-batches and ",
        "chunks >= 1, got pp(", s.pp, "), micro-batches(", s.micro_batches, "), chunks(", s.chunks, ")");
  check(static_cast<int>(s.ranks.size()) == s.pp, "the schedule has ", s.ranks.size(), " action lists for pp(", s.pp,
        ") ranks");
  // Forwards and backwards first: the transfers of a short-form file are derived from them.
  for (const bool transfers : {false, true})
    for (int r = 0; r < s.pp; ++r)
      for (const Action& a : s.ranks[r]) {
        if (is_transfer(a.kind) != transfers) continue;
        check(a.micro_batch < s.micro_batches, "rank ", r, ": ", to_string(a), " names micro-batch ", a.micro_batch,
              ", but the schedule has ", s.micro_batches, " (0..", s.micro_batches - 1, ")");
        check(a.chunk < s.chunks, "rank ", r, ": ", to_string(a), " names chunk ", a.chunk, ", but each rank has ",
              s.chunks, " (0..", s.chunks - 1, ")");
        check(!transfers || (a.peer >= 0 && a.peer < s.pp), "rank ", r, ": ", to_string(a), " names rank ", a.peer,
              ", but the pipeline has ", s.pp, " ranks");
      }
}

void check_compute(const Schedule& s, int r, const Index& index) {
  std::set<std::tuple<ActionKind, int, int>> done;
  for (const Action& a : s.ranks[r]) {
    if (is_transfer(a.kind)) continue;
    const bool fwd = a.kind == ActionKind::Forward;
    check(done.emplace(a.kind, a.micro_batch, a.chunk).second, "rank ", r, ": micro-batch ", a.micro_batch,
          chunk_text(s, a.chunk), " is ", fwd ? "forwarded" : "backwarded", " twice");
    check(fwd || done.contains({ActionKind::Forward, a.micro_batch, a.chunk}), "rank ", r, ": ", to_string(a),
          " comes before the forward of micro-batch ", a.micro_batch, chunk_text(s, a.chunk),
          " (a backward needs its forward's activations)");
  }
  for (int c = 0; c < s.chunks; ++c)
    for (int mb = 0; mb < s.micro_batches; ++mb)
      for (ActionKind kind : {ActionKind::Forward, ActionKind::Backward})
        check(index.contains({kind, mb, c}), "rank ", r, ": micro-batch ", mb, chunk_text(s, c), " is never ",
              kind == ActionKind::Forward ? "forwarded" : "backwarded");
}

void check_transfers(const Schedule& s, int r, const std::vector<Index>& index) {
  const std::vector<Action>& actions = s.ranks[r];
  for (size_t i = 0; i < actions.size(); ++i) {
    const Action& a = actions[i];
    const int stage = s.virtual_stage(r, a.chunk);
    const std::string name = to_string(a);
    if (!is_transfer(a.kind)) {
      // The receive this compute needs must come before it.
      const ActionKind in = a.kind == ActionKind::Forward ? ActionKind::RecvActivation : ActionKind::RecvGradient;
      const int from = transfer_partner_stage(s, in, stage);
      if (from < 0) continue;
      const Action recv{in, a.micro_batch, a.chunk, from % s.pp};
      const auto it = index[r].find({in, a.micro_batch, a.chunk});
      check(it != index[r].end() && it->second < i, "rank ", r, ": ", name, " needs the ", payload(in),
            " of micro-batch ", a.micro_batch, chunk_text(s, a.chunk), " from rank ", recv.peer, ", but ",
            to_string(recv), it == index[r].end() ? " is missing" : " comes after it");
      continue;
    }
    const int partner = transfer_partner_stage(s, a.kind, stage);
    check(partner >= 0, "rank ", r, ": ", name, " ", is_send(a.kind) ? "sends" : "receives", " a ", payload(a.kind),
          " but virtual stage ", stage, " has no ",
          a.kind == ActionKind::SendActivation || a.kind == ActionKind::RecvGradient ? "next" : "previous",
          " stage to exchange it with");
    check(a.peer == partner % s.pp, "rank ", r, ": ", name, " names rank ", a.peer, ", but the ", payload(a.kind),
          " of virtual stage ", stage, is_send(a.kind) ? " goes to rank " : " comes from rank ", partner % s.pp);
    const size_t first = index[r].at({a.kind, a.micro_batch, a.chunk});
    check(first == i, "rank ", r, ": ", name, " appears twice (positions ", first + 1, " and ", i + 1, ")");
    if (is_send(a.kind)) {
      const ActionKind producer = a.kind == ActionKind::SendActivation ? ActionKind::Forward : ActionKind::Backward;
      const size_t made = index[r].at({producer, a.micro_batch, a.chunk});
      check(made < i, "rank ", r, ": ", name, " comes before ", to_string(s.ranks[r][made]), ", whose output it sends");
    } else {
      // A send needs no receive to complete (sends are buffered), so only receives are matched:
      // every send then has its receive because every compute's receive was checked above.
      const ActionKind send =
          a.kind == ActionKind::RecvActivation ? ActionKind::SendActivation : ActionKind::SendGradient;
      const ActionKind consumer = a.kind == ActionKind::RecvActivation ? ActionKind::Forward : ActionKind::Backward;
      check(index[a.peer].contains({send, a.micro_batch, partner / s.pp}), "rank ", r, ": ",
            to_string(s.ranks[r][index[r].at({consumer, a.micro_batch, a.chunk})]), " waits for the ", payload(a.kind),
            " of micro-batch ", a.micro_batch, chunk_text(s, a.chunk), " that rank ", a.peer, " never sends");
    }
  }
}

}  // namespace

void check_schedule(const Schedule& s) {
  check_sizes_and_ranges(s);
  std::vector<Index> index(static_cast<size_t>(s.pp));
  for (int r = 0; r < s.pp; ++r)
    for (size_t i = 0; i < s.ranks[r].size(); ++i) {
      const Action& a = s.ranks[r][i];
      index[r].emplace(std::tuple{a.kind, a.micro_batch, a.chunk}, i);
    }
  for (int r = 0; r < s.pp; ++r) check_compute(s, r, index[r]);
  for (int r = 0; r < s.pp; ++r) check_transfers(s, r, index);
  simulate(s);
}

}  // namespace loom::parallel::pipeline
