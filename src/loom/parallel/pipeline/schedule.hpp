// A pipeline schedule is data (DESIGN decision 4): for every rank, the ordered list of what it
// does — forward or backward of one micro-batch through one of its model chunks, and the
// point-to-point sends and receives between neighbouring stages. One executor runs any
// schedule; the same lists feed the pre-flight check and the timeline picture.
// Chunk c of rank r is virtual stage c*pp + r (Megatron's interleaving; chunk 0 without it):
// activations flow from virtual stage k to k + 1, gradients from k + 1 back to k.
#pragma once

#include <string>
#include <vector>

namespace loom::parallel::pipeline {

enum class ActionKind { Forward, Backward, SendActivation, RecvActivation, SendGradient, RecvGradient };

struct Action {
  ActionKind kind = ActionKind::Forward;
  int micro_batch = 0;
  // This rank's model chunk the action belongs to: a send carries the output of its chunk, a
  // receive feeds its chunk. Both ends name their own chunk (they differ where rank pp-1's
  // chunk c hands over to rank 0's chunk c+1); they match through the virtual stages.
  int chunk = 0;
  int peer = -1;  // the other rank of a send or receive; -1 for forward and backward
  bool operator==(const Action&) const = default;
};

bool is_send(ActionKind kind);
bool is_recv(ActionKind kind);
inline bool is_transfer(ActionKind kind) { return is_send(kind) || is_recv(kind); }

struct Schedule {
  int pp = 1;                              // p: pipeline ranks
  int micro_batches = 1;                   // m
  int chunks = 1;                          // v: model chunks per rank
  std::vector<std::vector<Action>> ranks;  // (pp) each rank's actions in execution order

  int virtual_stages() const { return pp * chunks; }
  int virtual_stage(int rank, int chunk) const { return chunk * pp + rank; }
};

// An empty schedule (one empty action list per rank); throws loom::Error naming the values
// unless pp, micro_batches and chunks are all >= 1.
Schedule make_schedule(int pp, int micro_batches, int chunks = 1);

// The virtual stage at the other end of a transfer made by virtual stage k (k + 1 for a sent
// activation or a received gradient, k - 1 otherwise); -1 when there is none.
int transfer_partner_stage(const Schedule& s, ActionKind kind, int stage);

// Adds the transfers to a schedule of forwards and backwards: each forward receives its input
// from the previous virtual stage just before it and sends its output on just after it; each
// backward likewise receives the gradient from the next stage and sends one back. The
// executor posts them asynchronously; a receive placed right before its consumer is the
// latest point it can complete.
Schedule with_transfers(const Schedule& compute_only);
// The forwards and backwards alone.
Schedule without_transfers(const Schedule& s);

// Text form of one action: F3, B3 (micro-batch 3), F3.1 (chunk 1), SA3>1 / RA3<0 (send
// activation to rank 1 / receive it from rank 0), SG3>0 / RG3<2 (the same for gradients).
std::string to_string(const Action& a);
// Throws loom::Error naming the token when it is not one of the forms above.
Action parse_action(const std::string& token);

// One header line `pp=4 micro_batches=8 chunks=1`, then one line per rank: `rank 0: F0 F1 B0 B1`.
std::string format_schedule(const Schedule& s);
// Reads format_schedule's form. The header and the `rank N:` labels are optional ('#' starts a
// comment): without a header, pp is the number of rank lines and m and v the largest
// micro-batch and chunk seen plus one. Lines of forwards and backwards only get their
// transfers from with_transfers; once any transfer is written, all of them must be.
Schedule parse_schedule(const std::string& text);

}  // namespace loom::parallel::pipeline
