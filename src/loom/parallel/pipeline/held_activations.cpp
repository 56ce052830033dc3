#include "loom/parallel/pipeline/held_activations.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "loom/error.hpp"

namespace loom::parallel::pipeline {

namespace {
// A transfer's tensor: (gradient, micro-batch, chunk), as the executor keys them.
using TransferKey = std::tuple<bool, int, int>;
TransferKey key_of(const Action& a) {
  const bool gradient = a.kind == ActionKind::Backward || a.kind == ActionKind::RecvGradient ||
                        a.kind == ActionKind::SendGradient;
  return {gradient, a.micro_batch, a.chunk};
}
}  // namespace

int64_t peak_held_bytes(const std::vector<Action>& actions, const std::vector<int64_t>& chunk_bytes) {
  std::vector<ChunkRun> chunks;
  for (const int64_t bytes : chunk_bytes) chunks.push_back({bytes, bytes, bytes});
  return peak_running_bytes(actions, chunks, 0, std::vector<size_t>(actions.size(), actions.size()));
}

std::vector<std::vector<size_t>> sends_reaped(const Schedule& s, Receivers receivers) {
  const size_t P = static_cast<size_t>(s.pp);
  // A transfer's tensor as the executor tags it: (gradient, micro-batch, receiving virtual stage).
  auto tag = [&](int rank, const Action& a) {
    const bool gradient = a.kind == ActionKind::SendGradient || a.kind == ActionKind::RecvGradient;
    const int stage = s.virtual_stage(rank, a.chunk) + (is_send(a.kind) ? (gradient ? -1 : 1) : 0);
    return std::make_tuple(gradient, a.micro_batch, stage);
  };
  std::map<std::tuple<bool, int, int>, std::pair<int, size_t>> sent, received;  // tag -> (rank, index)
  for (size_t q = 0; q < P; ++q)
    for (size_t i = 0; i < s.ranks[q].size(); ++i) {
      const Action& a = s.ranks[q][i];
      if (is_send(a.kind)) sent[tag(static_cast<int>(q), a)] = {static_cast<int>(q), i};
      if (is_recv(a.kind)) received[tag(static_cast<int>(q), a)] = {static_cast<int>(q), i};
    }
  // known[q][i][x]: how many of rank x's actions are done by the end of rank q's action i: its
  // own before it, and through each tensor it waited for, what its sender had done by the send.
  std::vector<std::vector<std::vector<size_t>>> known(P);
  std::vector<std::map<std::tuple<bool, int, int>, size_t>> waiting(P);  // posted receives: tag -> index
  std::vector<size_t> next(P, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t q = 0; q < P; ++q)
      for (; next[q] < s.ranks[q].size(); ++next[q]) {
        const size_t i = next[q];
        const Action& a = s.ranks[q][i];
        std::vector<size_t> k = i > 0 ? known[q][i - 1] : std::vector<size_t>(P, 0);
        k[q] = i + 1;
        if (is_recv(a.kind)) waiting[q][tag(static_cast<int>(q), a)] = i;
        if (!is_transfer(a.kind)) {
          // The compute takes the tensor its receive posted (its tag: the receive's).
          Action as_recv = a;
          as_recv.kind = a.kind == ActionKind::Forward ? ActionKind::RecvActivation : ActionKind::RecvGradient;
          const auto w = waiting[q].find(tag(static_cast<int>(q), as_recv));
          if (w != waiting[q].end()) {
            const auto from = sent.find(w->first);
            check(from != sent.end(), to_string(a), " on rank ", q, " waits for a tensor no rank sends");
            const auto [x, j] = from->second;
            if (next[static_cast<size_t>(x)] <= j) break;  // not sent yet in this pass
            for (size_t y = 0; y < P; ++y) k[y] = std::max(k[y], known[static_cast<size_t>(x)][j][y]);
          }
        }
        known[q].push_back(std::move(k));
        progress = true;
      }
  }
  std::vector<std::vector<size_t>> reaped_by_rank(P);
  for (size_t r = 0; r < P; ++r) {
    const std::vector<Action>& actions = s.ranks[r];
    check(known[r].size() == actions.size(), "pipeline schedule: rank ", r, "'s actions never all run (a deadlock)");
    std::vector<size_t>& reaped = reaped_by_rank[r];
    reaped.assign(actions.size(), actions.size());
    for (size_t i = 0; i < actions.size(); ++i) {
      if (!is_send(actions[i].kind)) continue;
      const auto to = received.find(tag(static_cast<int>(r), actions[i]));
      check(to != received.end(), to_string(actions[i]), " on rank ", r, " sends a tensor no rank receives");
      const auto [q, j] = to->second;
      for (size_t t = i + 1; t < actions.size() && reaped[i] == actions.size(); ++t)
        if (!is_transfer(actions[t].kind) && (receivers == Receivers::OnTime || known[r][t][static_cast<size_t>(q)] > j))
          reaped[i] = t;
    }
  }
  return reaped_by_rank;
}

std::vector<size_t> sends_reaped(const Schedule& s, int r, Receivers receivers) {
  return sends_reaped(s, receivers).at(static_cast<size_t>(r));
}

int64_t peak_running_bytes(const std::vector<Action>& actions, const std::vector<ChunkRun>& chunks,
                           int64_t transfer_bytes, const std::vector<size_t>& reaped) {
  std::map<TransferKey, size_t> sends;  // an output's send: its index
  for (size_t i = 0; i < actions.size(); ++i)
    if (is_send(actions[i].kind)) sends[key_of(actions[i])] = i;
  std::set<TransferKey> posted;
  std::multiset<size_t> outputs;  // the outputs in transit: the index of the action that reaps each
  int64_t held = 0, received = 0, peak = 0;
  for (size_t i = 0; i < actions.size(); ++i) {
    const Action& a = actions[i];
    if (is_recv(a.kind)) {
      posted.insert(key_of(a));
      received += transfer_bytes;
    }
    if (is_transfer(a.kind)) continue;
    check(a.chunk >= 0 && a.chunk < static_cast<int>(chunks.size()), to_string(a), " names chunk ", a.chunk,
          ", but the rank holds ", chunks.size());
    const ChunkRun& c = chunks[static_cast<size_t>(a.chunk)];
    if (posted.erase(key_of(a)) > 0) received -= transfer_bytes;  // the run counts its own input
    const int64_t in_transit = received + static_cast<int64_t>(outputs.size()) * transfer_bytes;
    if (a.kind == ActionKind::Forward) {
      peak = std::max(peak, held + in_transit + c.forward);
      held += c.kept;
    } else {
      held -= c.kept;
      peak = std::max(peak, held + in_transit + c.backward);
    }
    outputs.erase(i);
    if (const auto send = sends.find(key_of(a)); send != sends.end()) outputs.insert(reaped.at(send->second));
  }
  return peak;
}

}  // namespace loom::parallel::pipeline
