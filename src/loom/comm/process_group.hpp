// ProcessGroup: one MPI communicator and the collectives Loom needs on it, each blocking
// or asynchronous (returning a Work). Collectives run on the group's communication thread
// in issue order; point-to-point transfers are posted at once as non-blocking MPI calls on
// a separate communicator, so a pipeline's sends and receives never queue behind a
// collective. All-reduce takes any algorithm of algorithms.hpp, per group or per call.
// Every wait is watched (watchdog.hpp), a collective's and a transfer's alike: one that waits
// longer than the timeout (the trainer's comm_timeout; else LOOM_COMM_TIMEOUT seconds, default
// 300; a group split from another inherits its timeout) ends the job with a report naming
// the ranks that never arrived and the rank holding the job up. The ranks check that they
// make the same call on a group's first collectives and every few after (LOOM_COMM_DEBUG=1:
// on every one).
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <mpi.h>

#include "loom/comm/algorithms.hpp"
#include "loom/comm/comm_thread.hpp"
#include "loom/comm/emulated_link.hpp"
#include "loom/comm/reduce_op.hpp"
#include "loom/comm/watchdog.hpp"
#include "loom/comm/work.hpp"
#include "loom/tensor/tensor.hpp"

namespace loom::comm {

// What a group's collectives did since the last reset: how many, the bytes of the whole
// tensors they reduced or gathered, the seconds the communication thread spent on them, and
// the seconds callers spent waiting for them (a blocking call's whole time, a started one's
// wait): the part of that communication compute did not hide.
struct CommStats {
  int64_t calls = 0;
  int64_t bytes = 0;
  double seconds = 0.0;
  int64_t sent_bytes = 0;  // what this rank's point-to-point sends put on the wire
  double waited_seconds = 0.0;
};

// LOOM_COMM_TIMEOUT as seconds (nullopt when unset); loom::Error when it is not seconds >= 0.
std::optional<double> timeout_from_environment();

class ProcessGroup {
 public:
  // Works on its own duplicates of comm; name appears in errors and traces ("dp", "tp").
  ProcessGroup(MPI_Comm comm, std::string name);
  // A group of this process alone, without MPI: the serial run's world. Its collectives
  // are what they are on one rank (a reduction or gather copies, a broadcast leaves the
  // data), so the serial run is the one-rank layout rather than a special case.
  static std::unique_ptr<ProcessGroup> single_process(std::string name = "world");
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  // Whether this is a single_process() group (no MPI underneath).
  bool is_single_process() const { return single_process_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& name() const { return name_; }
  // How many of the group's ranks share this rank's node (shared-memory domain).
  int ranks_on_node() const { return ranks_on_node_; }
  void set_default_algorithm(AllReduceAlgorithm a) { default_algorithm_ = a; }
  AllReduceAlgorithm default_algorithm() const { return default_algorithm_; }
  void set_param_servers(int k);
  // Seconds a collective may wait before the watchdog ends the job; 0 turns it off.
  void set_timeout(double seconds) { timeout_s_ = seconds; }
  double timeout() const { return timeout_s_; }
  // Debug mode: ranks compare every collective's name and size before running it (not only
  // the sampled ones, Watchdog::checked).
  void set_debug_checks(bool on) { debug_checks_ = on; }
  // An emulated network: each all-reduce, reduce-scatter and all-gather takes at least the
  // time its algorithm's messages take on a link of `gbps` gigabits/s and `latency_us`
  // (emulated_link.hpp; the thread sleeps out the difference, using no CPU), so overlap of
  // communication with compute can be measured on one machine. gbps <= 0 turns it off.
  void set_emulated_link(double gbps, double latency_us);
  // The emulated link (off by default): point-to-point users that overlap their transfers
  // with compute (context parallelism's ring) price their messages on it.
  const EmulatedLink& emulated_link_cost() const { return link_; }
  // The dtype activations and their gradients cross the wire in on this group (F32 or BF16):
  // the activation collectives of activation_wire.hpp read it; every other call of the group
  // (gradients, statistics, counts) ignores it. F32 unless the parallelize recipe sets it.
  void set_activation_dtype(DType d);
  DType activation_dtype() const { return activation_dtype_; }

  // data (n) on every rank becomes the reduction over ranks.
  Work all_reduce_async(float* data, int64_t n, ReduceOp op = ReduceOp::Sum,
                        std::optional<AllReduceAlgorithm> algorithm = std::nullopt);
  void all_reduce(float* data, int64_t n, ReduceOp op = ReduceOp::Sum,
                  std::optional<AllReduceAlgorithm> algorithm = std::nullopt);
  void all_reduce(Tensor& t, ReduceOp op = ReduceOp::Sum, std::optional<AllReduceAlgorithm> algorithm = std::nullopt);

  // in (size * n) on every rank; out (n) gets the reduction of everyone's chunk `rank`.
  // algorithm: Mpi (MPI_Reduce_scatter_block) or Ring. In place when out == in + rank * n
  // (the rest of in is then scratch).
  Work reduce_scatter_async(const float* in, float* out, int64_t n, ReduceOp op = ReduceOp::Sum,
                            AllReduceAlgorithm algorithm = AllReduceAlgorithm::Mpi);
  void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op = ReduceOp::Sum,
                      AllReduceAlgorithm algorithm = AllReduceAlgorithm::Mpi);
  // in (n) on every rank; out (size * n) gets every rank's in, in rank order. In place when
  // in == out + rank * n.
  Work all_gather_async(const float* in, float* out, int64_t n, AllReduceAlgorithm algorithm = AllReduceAlgorithm::Mpi);
  void all_gather(const Tensor& in, Tensor& out, AllReduceAlgorithm algorithm = AllReduceAlgorithm::Mpi);
  // Holds this group's queue until `before` (an operation of another group, issued earlier)
  // has completed, then runs `prepare` (if any) on this group's thread: what the caller queues
  // here next starts from before's result without the caller waiting for it (a 3D layer's
  // gather of its input gradient over one axis, behind the gradient's sum over another).
  void queue_after(const Work& before, std::function<void()> prepare = {});
  // Mixed precision on the wire: fp32 data sent and reduced as bf16 (half the bytes), the
  // result widened back to fp32 (bf16_wire.hpp); MPI's algorithms only. Counted in stats() at
  // 2 bytes an element. Same shapes and in-place rules as all_reduce and reduce_scatter.
  Work all_reduce_bf16_async(float* data, int64_t n, ReduceOp op = ReduceOp::Sum);
  Work reduce_scatter_bf16_async(const float* in, float* out, int64_t n, ReduceOp op = ReduceOp::Sum);
  // bf16 values: in (n) on every rank; out (size * n) gets every rank's, in rank order. In
  // place when in == out + rank * n.
  Work all_gather_bf16_async(const bfloat16* in, bfloat16* out, int64_t n);
  // bf16 values, uneven, as all_to_all_v_async.
  Work all_to_all_v_bf16_async(const bfloat16* in, std::vector<int64_t> send_counts, bfloat16* out,
                               std::vector<int64_t> recv_counts);

  Work broadcast_async(float* data, int64_t n, int root);
  void broadcast(Tensor& t, int root);
  // data (n): on root, the reduction over ranks; elsewhere unchanged.
  Work reduce_async(float* data, int64_t n, int root, ReduceOp op = ReduceOp::Sum);
  void reduce(Tensor& t, int root, ReduceOp op = ReduceOp::Sum);
  // in (size * n): block q goes to rank q; out (size * n): block q came from rank q.
  Work all_to_all_async(const float* in, float* out, int64_t n);
  void all_to_all(const Tensor& in, Tensor& out);
  // Uneven: send_counts[q] elements to rank q, recv_counts[q] from rank q, packed in rank order.
  Work all_to_all_v_async(const float* in, std::vector<int64_t> send_counts, float* out,
                          std::vector<int64_t> recv_counts);
  void all_to_all_v(const Tensor& in, const std::vector<int64_t>& send_counts, Tensor& out,
                    const std::vector<int64_t>& recv_counts);
  Work barrier_async();
  void barrier();

  // Bytes, copied bit for bit, for what is not a float tensor (text, records, integers);
  // byte_transport.hpp builds strings of any length on these. Counts are in bytes.
  Work broadcast_bytes_async(void* data, int64_t n, int root);
  // in (n) on every rank; out (size * n) gets every rank's in, in rank order.
  Work all_gather_bytes_async(const void* in, void* out, int64_t n);
  // Uneven: rank q gives counts[q] bytes (counts the same on every rank); out (the sum of
  // counts) gets them packed in rank order, on root alone, or on every rank when root is
  // nullopt. out is not read on the other ranks.
  Work gather_v_bytes_async(const void* in, std::vector<int64_t> counts, void* out, std::optional<int> root);

  Work send_async(const float* data, int64_t n, int dst, int tag = 0);
  Work recv_async(float* data, int64_t n, int src, int tag = 0);
  void send(const Tensor& t, int dst, int tag = 0);
  void recv(Tensor& t, int src, int tag = 0);
  // bf16 values; the buffer must live until the Work is waited.
  Work send_bf16_async(const bfloat16* data, int64_t n, int dst, int tag = 0);
  Work recv_bf16_async(bfloat16* data, int64_t n, int src, int tag = 0);

  CommStats stats() const;
  void reset_stats();

  // Collective over this group: ranks with the same color form a new group, ordered by key.
  std::unique_ptr<ProcessGroup> split(int color, int key, std::string name);

 private:
  // n and payload count elements of element_bytes (4: floats; 1: bytes); payload: those of
  // the whole tensor the collective works on (counted in stats()).
  Work broadcast_typed(void* data, int64_t n, int root, MPI_Datatype type, const char* op, int element_bytes);
  Work submit(const std::string& op, int64_t n, std::function<void()> body, int64_t payload = -1,
              int element_bytes = sizeof(float));
  // A point-to-point transfer with group rank peer, watched.
  Work transfer(Work work, int peer);
  // Posts a non-blocking send (or receive) of n elements of `type` (element_bytes each).
  Work post_p2p(bool send, void* data, int64_t n, MPI_Datatype type, int element_bytes, int peer, int tag);
  Work all_to_all_v_typed(const void* in, std::vector<int64_t> send_counts, void* out, std::vector<int64_t> recv_counts,
                          MPI_Datatype type, int element_bytes, const char* op);

  struct SingleProcess {};
  ProcessGroup(SingleProcess, std::string name);
  // The single-process group's collectives: out gets in (bytes) unless they are the same.
  Work copy_locally(const void* in, void* out, int64_t bytes);

  std::string name_;
  bool single_process_ = false;  // no communicator: size 1 without MPI
  int ranks_on_node_ = 1;
  MPI_Comm collective_comm_ = MPI_COMM_NULL;
  MPI_Comm p2p_comm_ = MPI_COMM_NULL;
  MPI_Comm check_comm_ = MPI_COMM_NULL;
  std::vector<int> world_ranks_;  // members, as ranks of MPI_COMM_WORLD
  std::string watch_key_;         // the same on every member
  int watch_slot_ = -1;
  double timeout_s_ = 300.0;
  bool debug_checks_ = false;
  EmulatedLink link_;
  DType activation_dtype_ = DType::F32;
  int rank_ = 0, size_ = 1;
  AllReduceAlgorithm default_algorithm_ = AllReduceAlgorithm::Mpi;
  int param_servers_ = 1;
  int64_t sequence_ = 0;
  int trace_row_ = 0;  // this group's communication thread's row in a trace
  std::unique_ptr<CommThread> thread_;
  struct Counters {
    std::atomic<int64_t> calls{0}, bytes{0}, nanoseconds{0}, sent_bytes{0};
  };
  std::shared_ptr<std::atomic<int64_t>> waited_ns_ = std::make_shared<std::atomic<int64_t>>(0);
  std::shared_ptr<Counters> counters_ = std::make_shared<Counters>();
};

}  // namespace loom::comm
