#include "loom/parallel/pipeline/timeline.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>

#include "loom/error.hpp"

namespace loom::parallel::pipeline {

namespace {

// One transfer: (gradient?, micro-batch, sending virtual stage, receiving virtual stage).
using TransferKey = std::tuple<bool, int, int, int>;

bool carries_gradient(ActionKind kind) { return kind == ActionKind::SendGradient || kind == ActionKind::RecvGradient; }

TransferKey key_of(const Schedule& s, int rank, const Action& a) {
  const int here = s.virtual_stage(rank, a.chunk);
  const int there = transfer_partner_stage(s, a.kind, here);
  return is_send(a.kind) ? TransferKey{carries_gradient(a.kind), a.micro_batch, here, there}
                         : TransferKey{carries_gradient(a.kind), a.micro_batch, there, here};
}

// "B3" for a receive: the forward or backward on this rank that needs its data.
std::string consumer_name(const std::vector<Action>& actions, size_t recv_index) {
  const Action& a = actions[recv_index];
  const ActionKind need = a.kind == ActionKind::RecvActivation ? ActionKind::Forward : ActionKind::Backward;
  for (size_t i = recv_index + 1; i < actions.size(); ++i)
    if (actions[i].kind == need && actions[i].micro_batch == a.micro_batch && actions[i].chunk == a.chunk)
      return to_string(actions[i]);
  return to_string(a);
}

std::string what_is_received(const Schedule& s, const Action& a) {
  return std::string(a.kind == ActionKind::RecvActivation ? "the activation" : "the gradient") + " of micro-batch " +
         std::to_string(a.micro_batch) + (s.chunks > 1 ? " (chunk " + std::to_string(a.chunk) + ")" : "");
}

// Every rank left is stuck at a receive. Name a receive whose send no rank ever posts if there
// is one; otherwise follow who waits for whom from the lowest stuck rank around the cycle.
[[noreturn]] void report_deadlock(const Schedule& s, const std::vector<size_t>& pc) {
  std::map<TransferKey, int> sender;  // every send in the schedule -> its rank
  for (int r = 0; r < s.pp; ++r)
    for (const Action& a : s.ranks[r])
      if (is_send(a.kind)) sender.emplace(key_of(s, r, a), r);
  auto waits = [&](int r) {
    return "rank " + std::to_string(r) + ": " + consumer_name(s.ranks[r], pc[r]) + " waits for " +
           what_is_received(s, s.ranks[r][pc[r]]);
  };
  std::vector<int> stuck;
  for (int r = 0; r < s.pp; ++r)
    if (pc[r] < s.ranks[r].size()) stuck.push_back(r);
  for (int r : stuck)
    if (!sender.contains(key_of(s, r, s.ranks[r][pc[r]])))
      fail(waits(r), " that rank ", s.ranks[r][pc[r]].peer, " never sends");
  // Each stuck rank waits for a send of a rank that is stuck too (a posted send would have
  // let it go on), so the walk comes back to a rank it has seen.
  std::vector<int> seen;
  std::string msg = "deadlock: ";
  for (int r = stuck.front();;) {
    seen.push_back(r);
    r = sender.at(key_of(s, seen.back(), s.ranks[seen.back()][pc[seen.back()]]));
    msg += waits(seen.back()) + " from rank " + std::to_string(r);
    if (std::find(seen.begin(), seen.end(), r) != seen.end()) fail(msg, ", which is itself waiting (a cycle)");
    msg += ", and ";
  }
}

double total_busy(const Timeline& t) {
  double total = 0.0;
  for (int r = 0; r < t.pp; ++r) total += t.busy(r);
  return total;
}

}  // namespace

double Timeline::makespan() const {
  double end = 0.0;
  for (const auto& actions : ranks)
    for (const TimedAction& t : actions) end = std::max(end, t.end);
  return end;
}

double Timeline::busy(int rank) const {
  double total = 0.0;
  for (const TimedAction& t : ranks[rank])
    if (!is_transfer(t.action.kind)) total += t.end - t.start;
  return total;
}

double Timeline::bubble_fraction() const {
  const double span = makespan() * pp, idle = span - total_busy(*this);
  return span > 0 ? idle / span : 0.0;
}

double Timeline::bubble_over_compute() const {
  const double compute = total_busy(*this), idle = makespan() * pp - compute;
  return compute > 0 ? idle / compute : 0.0;
}

Timeline simulate(const Schedule& s, StepCosts costs) {
  check(s.pp >= 1 && static_cast<int>(s.ranks.size()) == s.pp, "the schedule has ", s.ranks.size(),
        " action lists for pp(", s.pp, ") ranks");
  Timeline t{s.pp, s.micro_batches, s.chunks, {}, std::vector<int>(static_cast<size_t>(s.pp), 0)};
  t.ranks.resize(static_cast<size_t>(s.pp));
  std::vector<size_t> pc(static_cast<size_t>(s.pp), 0);  // next action of each rank
  std::vector<double> clock(static_cast<size_t>(s.pp), 0.0);
  std::vector<int> held(static_cast<size_t>(s.pp), 0);
  std::map<TransferKey, double> posted;  // send -> the time it was posted
  // Sweep the ranks until none can move; the times do not depend on the sweep order, because
  // a receive completes at max(its rank's clock, the send's time) whenever it is simulated.
  for (bool moved = true; moved;) {
    moved = false;
    for (int r = 0; r < s.pp; ++r) {
      for (; pc[r] < s.ranks[r].size(); ++pc[r]) {
        const Action& a = s.ranks[r][pc[r]];
        TimedAction timed{a, clock[r], clock[r]};
        if (is_recv(a.kind)) {
          const auto it = posted.find(key_of(s, r, a));
          if (it == posted.end()) break;
          timed.end = clock[r] = std::max(clock[r], it->second);
        } else if (is_send(a.kind)) {
          posted.emplace(key_of(s, r, a), clock[r]);
        } else {
          const bool fwd = a.kind == ActionKind::Forward;
          timed.end = clock[r] += fwd ? costs.forward : costs.backward;
          held[r] += fwd ? 1 : -1;
          t.peak_activations[r] = std::max(t.peak_activations[r], held[r]);
        }
        t.ranks[r].push_back(timed);
        moved = true;
      }
    }
  }
  for (int r = 0; r < s.pp; ++r)
    if (pc[r] < s.ranks[r].size()) report_deadlock(s, pc);
  return t;
}

}  // namespace loom::parallel::pipeline
