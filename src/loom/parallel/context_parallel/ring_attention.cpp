#include "loom/parallel/context_parallel/ring_attention.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <utility>

#include "loom/comm/activation_wire.hpp"
#include "loom/comm/startup_watch.hpp"
#include "loom/error.hpp"
#include "loom/kernels/attention_block.hpp"
#include "loom/nn/saved_activation.hpp"
#include "loom/trace/recorder.hpp"

namespace loom::parallel::cp {

namespace {

namespace k = kernels;
using Clock = std::chrono::steady_clock;

enum Tag { kForwardKV = 71, kBackwardKV = 72, kBackwardGrad = 73 };

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The geometry of one rank's part: B sequences of two chunks of Tc rows, C features in NH
// heads, of which the views below take heads h0 .. h0 + nh (a group, heads_per_group).
struct Geometry {
  int64_t B, Tc, C, NH;
  int64_t h0 = 0, nh = NH;
  int64_t Tl() const { return 2 * Tc; }
  int64_t HS() const { return C / NH; }
  Geometry group(int64_t first, int64_t count) const { return {B, Tc, C, NH, first, count}; }
  k::AttentionBlock block(bool diagonal) const { return {B, nh, HS(), Tc, Tc, diagonal}; }
  // The dropout of this group's heads for query chunk `queries` against key chunk `keys`
  // (the chunks' indices in the sequence).
  k::AttentionDropout dropout(const k::AttentionDropout& d, int64_t queries, int64_t keys) const {
    return d.shifted(0, h0, queries * Tc, keys * Tc);
  }
  // q of chunk slot a inside qkv (B, Tl, 3C) (or dq inside dqkv).
  template <class T>
  k::HeadsOf<T> q(T* qkv, int64_t a) const { return {qkv + a * Tc * 3 * C + h0 * HS(), Tl() * 3 * C, 3 * C}; }
  // k (part 0) or v (part 1) of chunk slot c inside a packed (B, Tl, 2C) K/V buffer.
  template <class T>
  k::HeadsOf<T> kv(T* packed, int64_t c, int64_t part) const {
    return {packed + c * Tc * 2 * C + part * C + h0 * HS(), Tl() * 2 * C, 2 * C};
  }
  // chunk slot a of heads (B, Tl, C).
  template <class T>
  k::HeadsOf<T> heads(T* h, int64_t a) const { return {h + a * Tc * C + h0 * HS(), Tl() * C, C}; }
  // chunk slot a of per-row values (B, NH, Tl).
  template <class T>
  k::RowsOf<T> rows(T* r, int64_t a) const { return {r + a * Tc + h0 * Tl(), NH * Tl(), Tl()}; }
};

// fn(group geometry) for each group of heads_per_group heads.
template <class Fn>
void for_each_head_group(const Geometry& g, Fn&& fn) {
  const int64_t per = heads_per_group(g.Tc, g.C, g.NH);
  for (int64_t h0 = 0; h0 < g.NH; h0 += per) fn(g.group(h0, std::min(per, g.NH - h0)));
}

// K and V of qkv (B, T, 3C) as one (B, T, 2C) buffer: what travels the ring.
Tensor pack_kv(const Tensor& qkv, int64_t C) {
  const int64_t rows = qkv.size(0) * qkv.size(1);
  Tensor kv = Tensor::empty({qkv.size(0), qkv.size(1), 2 * C});
  for (int64_t r = 0; r < rows; ++r) std::memcpy(kv.f32() + r * 2 * C, qkv.f32() + r * 3 * C + C, 2 * C * sizeof(float));
  return kv;
}

// The blocks of a step: this rank's query chunks against the chunks whose K/V it holds now
// (those of rank `owner`); a key chunk after the query chunk is masked out entirely. fn(query
// slot, key slot, diagonal, the query chunk's and the key chunk's indices in the sequence).
template <class Fn>
void for_each_block(int rank, int owner, int cp, Split split, Fn&& fn) {
  const std::array<int64_t, 2> queries = chunks_of(rank, cp, split), keys = chunks_of(owner, cp, split);
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t c = 0; c < 2; ++c)
      if (keys[c] <= queries[a]) fn(a, c, keys[c] == queries[a], queries[a], keys[c]);
}

// A pair of transfers around the ring: send `out` to the next rank, receive `in` from the
// previous, in the cp group's activation dtype (bf16 in a bf16 run: K/V and the running dK/dV
// sums are rounded to bf16 at each hop, as a bf16 reduction rounds each partial sum).
// In the trace, an async span from the post until the hop is replaced (after its waits). On
// an emulated link (ProcessGroup::set_emulated_link) the hop is delivered no earlier than the
// link would carry it: after the hops before it, alpha + bytes x beta.
struct RingHop {
  comm::Work send, recv;
  trace::AsyncSpan span;
  Clock::time_point on_link{}, delivered{};  // when the emulated link starts and ends carrying it
};

RingHop hop(comm::ProcessGroup& g, const Tensor& out, Tensor& in, int tag, RingStats* stats) {
  const int next = (g.rank() + 1) % g.size(), prev = (g.rank() + g.size() - 1) % g.size();
  Clock::time_point on_link{}, delivered{};
  const int64_t bytes = comm::activation_wire_bytes(g, out.numel());
  if (stats != nullptr) {
    stats->bytes_sent += bytes;
    if (const double s = comm::emulated_message_seconds(g.emulated_link_cost(), bytes); s > 0) {
      on_link = std::max(Clock::now(), stats->link_free);
      delivered = on_link + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
      stats->link_free = delivered;
      stats->link_seconds += s;
    }
  }
  comm::stop_for_a_test("cp-ring");
  trace::AsyncSpan span("cp", tag == kBackwardGrad ? "dK/dV hop" : "K/V hop", {{"bytes", bytes}});
  return {comm::send_activations_async(g, out.f32(), out.numel(), next, tag),
          comm::recv_activations_async(g, in.f32(), in.numel(), prev, tag), std::move(span), on_link, delivered};
}

// Waits for a hop the block compute did not hide: its own span in the trace, counted as exposed.
void wait(const RingHop& h, RingStats* stats) {
  trace::Span span("cp", "ring wait");
  const auto t0 = Clock::now();
  h.send.wait();
  h.recv.wait();
  std::this_thread::sleep_until(h.delivered);
  if (stats != nullptr) {
    stats->wait_seconds += since(t0);
    if (h.delivered > t0) stats->link_exposed_seconds += std::chrono::duration<double>(h.delivered - std::max(t0, h.on_link)).count();
  }
}

}  // namespace

RingAttention::RingAttention(int64_t C, int64_t NH, comm::ProcessGroup& cp, Split split,
                             std::shared_ptr<RingStats> stats)
    : C_(C), NH_(NH), cp_(cp), split_(split), stats_(std::move(stats)) {
  check(NH > 0 && C % NH == 0, "ring attention: C (", C, ") must be divisible by NH (", NH, ")");
}

Tensor RingAttention::forward_impl(const Tensor& qkv, nn::Context& ctx) {
  trace::Span span("cp", "ring attention forward");
  const int P = cp_.size(), r = cp_.rank();
  check(qkv.ndim() == 3 && qkv.size(2) == 3 * C_ && qkv.size(1) % 2 == 0, "ring attention expects (B, T/cp, 3C = ",
        3 * C_, ") with two chunks of rows, got ", shape_str(qkv.shape()));
  const Geometry g{qkv.size(0), qkv.size(1) / 2, C_, NH_};
  RingStats* stats = stats_.get();
  Tensor heads = Tensor::empty({g.B, g.Tl(), C_});     // the running (unnormalised) output
  Tensor lse = Tensor::empty({g.B, NH_, g.Tl()});      // running max, then log-sum-exp
  Tensor sums = Tensor::empty({g.B, NH_, g.Tl()});     // running sum of exp-scores
  Tensor scores = Tensor::empty({g.B, heads_per_group(g.Tc, C_, NH_), g.Tc, g.Tc});
  k::attention_block_start({g.B, NH_, g.HS(), g.Tl(), g.Tl(), false}, {heads.f32(), g.Tl() * C_, C_},
                           {lse.f32(), NH_ * g.Tl(), g.Tl()}, {sums.f32(), NH_ * g.Tl(), g.Tl()});
  Tensor kv = pack_kv(qkv, C_), next = P > 1 ? Tensor::empty(kv.shape()) : Tensor();
  const k::AttentionDropout drop = dropout(ctx);
  for (int s = 0; s < P; ++s) {
    // Post the next hop first: K/V travel while this step's blocks are computed.
    RingHop h;
    if (s + 1 < P) h = hop(cp_, kv, next, kForwardKV, stats);
    const auto t0 = Clock::now();
    for_each_block(r, (r + P - s) % P, P, split_, [&](int64_t a, int64_t c, bool diagonal, int64_t qi, int64_t ki) {
      for_each_head_group(g, [&](const Geometry& h) {
        k::attention_block_forward(h.block(diagonal), h.q(qkv.f32(), a), h.kv(kv.f32(), c, 0),
                                   h.kv(kv.f32(), c, 1), h.heads(heads.f32(), a), h.rows(lse.f32(), a),
                                   h.rows(sums.f32(), a), scores.f32(), h.dropout(drop, qi, ki));
      });
    });
    if (stats != nullptr) stats->compute_seconds += since(t0);
    if (s + 1 < P) {
      wait(h, stats);
      std::swap(kv, next);
    }
  }
  k::attention_block_finish({g.B, NH_, g.HS(), g.Tl(), g.Tl(), false}, {heads.f32(), g.Tl() * C_, C_},
                            {lse.f32(), NH_ * g.Tl(), g.Tl()}, {sums.f32(), NH_ * g.Tl(), g.Tl()});
  // Mixed precision keeps q, k, v and the output as bf16 copies (the products read q, k, v in
  // bf16 anyway; the output is widened for the softmax backward's row term, as FlashAttention
  // keeps its bf16 output); the log-sum-exp stays fp32. The output goes on as that same bf16
  // copy: the projection's GEMM reads it in bf16 anyway and keeps it for its weight gradient,
  // so one copy serves both layers (the same bits as rounding the fp32 output there).
  const Tensor kept = nn::saved_activation(heads, ctx);
  ctx.save(this, {nn::saved_activation(qkv, ctx), kept, lse});
  return kept;
}

Tensor RingAttention::backward_impl(const Tensor& dheads, nn::Context& ctx) {
  trace::Span span("cp", "ring attention backward");
  const Tensor qkv = nn::widened(ctx.saved(this, 0));  // fp32 for the packed K/V and the views below
  const Tensor heads = nn::widened(ctx.saved(this, 1));
  const Tensor& lse = ctx.saved(this, 2);
  const int P = cp_.size(), r = cp_.rank();
  const Geometry g{qkv.size(0), qkv.size(1) / 2, C_, NH_};
  RingStats* stats = stats_.get();
  Tensor delta = Tensor::empty({g.B, NH_, g.Tl()});
  k::attention_row_delta({g.B, NH_, g.HS(), g.Tl(), g.Tl(), false}, {heads.f32(), g.Tl() * C_, C_},
                         {dheads.f32(), g.Tl() * C_, C_}, {delta.f32(), NH_ * g.Tl(), g.Tl()});
  Tensor dqkv = Tensor::zeros(qkv.shape());  // dq accumulates here; dk, dv arrive last
  Tensor scores = Tensor::empty({g.B, heads_per_group(g.Tc, C_, NH_), g.Tc, g.Tc}), dscores = Tensor::empty(scores.shape());
  Tensor kv = pack_kv(qkv, C_), next = P > 1 ? Tensor::empty(kv.shape()) : Tensor();
  // dK/dV of the K/V held now: this rank's blocks (local), plus what the ranks before it
  // added (arrived), passed on (outgoing) while the next step computes.
  Tensor local = Tensor::empty(kv.shape()), arrived = Tensor::empty(kv.shape()), outgoing = Tensor::empty(kv.shape());
  RingHop grads;
  bool grads_in_flight = false;
  const k::AttentionDropout drop = dropout(ctx);
  for (int s = 0; s < P; ++s) {
    RingHop h;
    if (s + 1 < P) h = hop(cp_, kv, next, kBackwardKV, stats);
    std::memset(local.f32(), 0, static_cast<size_t>(local.nbytes()));
    const auto t0 = Clock::now();
    for_each_block(r, (r + P - s) % P, P, split_, [&](int64_t a, int64_t c, bool diagonal, int64_t qi, int64_t ki) {
      for_each_head_group(g, [&](const Geometry& h) {
        k::attention_block_backward(h.block(diagonal), h.q(qkv.f32(), a), h.kv(kv.f32(), c, 0), h.kv(kv.f32(), c, 1),
                                    h.heads(dheads.f32(), a), h.rows(static_cast<const float*>(lse.f32()), a),
                                    h.rows(static_cast<const float*>(delta.f32()), a), h.q(dqkv.f32(), a),
                                    h.kv(local.f32(), c, 0), h.kv(local.f32(), c, 1), scores.f32(), dscores.f32(),
                                    h.dropout(drop, qi, ki));
      });
    });
    if (stats != nullptr) stats->compute_seconds += since(t0);
    if (P > 1) {
      if (grads_in_flight) {  // the previous rank's sum for these K/V, and our last send's buffer back
        wait(grads, stats);
        const float* in = arrived.f32();
        float* sum = local.f32();
        for (int64_t i = 0; i < local.numel(); ++i) sum[i] += in[i];
      }
      std::swap(local, outgoing);
      grads = hop(cp_, outgoing, arrived, kBackwardGrad, stats);  // the last hop brings the owner its sum
      grads_in_flight = true;
      if (s + 1 < P) {
        wait(h, stats);
        std::swap(kv, next);
      }
    }
  }
  const Tensor* own = &local;
  if (P > 1) {
    wait(grads, stats);
    own = &arrived;
  }
  // dK, dV of this rank's rows, summed over every rank's queries.
  const int64_t rows = g.B * g.Tl();
  for (int64_t i = 0; i < rows; ++i)
    std::memcpy(dqkv.f32() + i * 3 * C_ + C_, own->f32() + i * 2 * C_, 2 * C_ * sizeof(float));
  ctx.release(this);
  return dqkv;
}

}  // namespace loom::parallel::cp
