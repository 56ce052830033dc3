#include "loom/comm/process_group.hpp"

#include <algorithm>
#include <chrono>
#include <thread>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>

#include "loom/comm/mpi_collectives.hpp"
#include "loom/comm/mpi_util.hpp"
#include "loom/comm/startup_watch.hpp"
#include "loom/error.hpp"
#include "loom/trace/recorder.hpp"
#include "loom/comm/bf16_wire.hpp"

namespace loom::comm {

namespace {

// Under an emulated link (set_emulated_link) a collective lasts at least its time on that link.
void last_at_least(std::chrono::steady_clock::time_point start, double seconds) {
  if (seconds > 0) std::this_thread::sleep_until(start + std::chrono::duration<double>(seconds));
}

}  // namespace

std::optional<double> timeout_from_environment() {
  const char* t = std::getenv("LOOM_COMM_TIMEOUT");
  if (t == nullptr) return std::nullopt;
  char* end = nullptr;
  const double seconds = std::strtod(t, &end);
  check(end != t && *end == '\0' && seconds >= 0, "LOOM_COMM_TIMEOUT must be seconds >= 0, got '", t, "'");
  return seconds;
}

ProcessGroup::ProcessGroup(MPI_Comm comm, std::string name) : name_(std::move(name)) {
  check_mpi(MPI_Comm_dup(comm, &collective_comm_), "MPI_Comm_dup");
  check_mpi(MPI_Comm_dup(comm, &p2p_comm_), "MPI_Comm_dup");
  check_mpi(MPI_Comm_dup(comm, &check_comm_), "MPI_Comm_dup");
  rank_ = comm_rank(collective_comm_);
  size_ = comm_size(collective_comm_);
  MPI_Comm node = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split_type(check_comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
  ranks_on_node_ = comm_size(node);
  MPI_Comm_free(&node);
  MPI_Group mine, world;
  MPI_Comm_group(collective_comm_, &mine);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  std::vector<int> local(static_cast<size_t>(size_));
  world_ranks_.resize(static_cast<size_t>(size_));
  for (int q = 0; q < size_; ++q) local[q] = q;
  MPI_Group_translate_ranks(mine, size_, local.data(), world, world_ranks_.data());
  MPI_Group_free(&mine);
  MPI_Group_free(&world);
  // Members create their groups in the same order, so counting same-named groups with the
  // same first member gives every member the same key.
  static std::map<std::string, int> created;
  const std::string base = name_ + "@" + std::to_string(world_ranks_[0]) + "/" + std::to_string(size_);
  watch_key_ = base + "#" + std::to_string(created[base]++);
  if (Watchdog* w = Watchdog::instance()) watch_slot_ = w->register_group(watch_key_);
  timeout_s_ = timeout_from_environment().value_or(timeout_s_);
  if (const char* d = std::getenv("LOOM_COMM_DEBUG")) debug_checks_ = std::string(d) == "1";
  thread_ = std::make_unique<CommThread>();
  trace_row_ = trace::row("comm " + name_, /*unique=*/true);
}

ProcessGroup::ProcessGroup(SingleProcess, std::string name) : name_(std::move(name)), single_process_(true) {
  world_ranks_ = {0};
}

std::unique_ptr<ProcessGroup> ProcessGroup::single_process(std::string name) {
  return std::unique_ptr<ProcessGroup>(new ProcessGroup(SingleProcess{}, std::move(name)));
}

Work ProcessGroup::copy_locally(const void* in, void* out, int64_t bytes) {
  if (in != out && bytes > 0) std::memmove(out, in, static_cast<size_t>(bytes));
  return Work::completed();
}

ProcessGroup::~ProcessGroup() {
  if (single_process_) return;
  thread_.reset();  // drains queued collectives before the communicators go
  if (Watchdog* w = Watchdog::instance(); w != nullptr && watch_slot_ >= 0) w->release_group(watch_slot_);
  MPI_Comm_free(&collective_comm_);
  MPI_Comm_free(&p2p_comm_);
  MPI_Comm_free(&check_comm_);
}

void ProcessGroup::set_param_servers(int k) {
  check(k >= 1, "param-server needs at least 1 server, got ", k);
  param_servers_ = k;
}

void ProcessGroup::set_activation_dtype(DType d) {
  check(d == DType::F32 || d == DType::BF16, "group '", name_, "': activations cross the wire in fp32 or bf16");
  activation_dtype_ = d;
}

CommStats ProcessGroup::stats() const {
  return CommStats{counters_->calls.load(), counters_->bytes.load(), 1e-9 * static_cast<double>(counters_->nanoseconds.load()),
                   counters_->sent_bytes.load(), 1e-9 * static_cast<double>(waited_ns_->load())};
}

void ProcessGroup::reset_stats() {
  counters_->calls = 0;
  counters_->bytes = 0;
  counters_->nanoseconds = 0;
  counters_->sent_bytes = 0;
  *waited_ns_ = 0;
}

Work ProcessGroup::submit(const std::string& op, int64_t n, std::function<void()> body, int64_t payload,
                          int element_bytes) {
  const int64_t sequence = ++sequence_;
  // n < 0: the size differs by rank (all_to_all_v), so the call check compares the operation alone.
  const std::string operation =
      op + "(" + (n < 0 ? std::string("uneven") : std::to_string(n) + (element_bytes == 1 ? " bytes" : element_bytes == 2 ? " bf16" : " floats")) + ")";
  const std::string description = operation + " #" + std::to_string(sequence) + " on group '" + name_ + "'";
  Watchdog* watchdog = Watchdog::instance();
  MPI_Comm check_comm = check_comm_;
  const bool checked = Watchdog::checked(sequence, debug_checks_);
  const std::string group = name_;
  const int slot = watch_slot_;
  std::shared_ptr<Counters> counters = counters_;
  const int64_t bytes = element_bytes * (payload >= 0 ? payload : std::max<int64_t>(n, 0));
  const int row = trace_row_;
  Work work = thread_->submit(description, [=, body = std::move(body)]() {
    if (watchdog != nullptr && slot >= 0) watchdog->entered(slot, sequence, operation);
    if (checked) Watchdog::check_same_call(check_comm, group, sequence, operation);
    const auto start = std::chrono::steady_clock::now();
    trace::set_thread_row(row);
    // op: "all_reduce[ring,sum]", the operation, then its algorithm and reduction.
    const size_t bracket = op.find('[');
    trace::Span span("comm", std::string_view(op).substr(0, bracket));
    if (trace::enabled()) {
      span.arg("group", group).arg("bytes", bytes).arg("seq", sequence);
      if (bracket != std::string::npos)
        span.arg("algorithm", op.substr(bracket + 1, op.find_first_of(",]", bracket) - bracket - 1));
    }
    body();
    counters->nanoseconds += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
    counters->bytes += bytes;
    ++counters->calls;
  });
  if (watchdog != nullptr && slot >= 0) work.watch(WaitSite{watch_key_, world_ranks_, sequence, -1}, timeout_s_);
  work.count_waits_into(waited_ns_);
  return work;
}

Work ProcessGroup::transfer(Work work, int peer) {
  if (Watchdog::instance() != nullptr) work.watch(WaitSite{watch_key_, {}, 0, world_ranks_[static_cast<size_t>(peer)]}, timeout_s_);
  return work;
}

void ProcessGroup::set_emulated_link(double gbps, double latency_us) {
  check(latency_us >= 0, "emulated link latency must be >= 0 us, got ", latency_us);
  link_ = emulated_link(gbps, latency_us);
}

Work ProcessGroup::all_reduce_async(float* data, int64_t n, ReduceOp op, std::optional<AllReduceAlgorithm> algorithm) {
  if (single_process_) return Work::completed();  // the reduction over one rank is its data
  const AllReduceAlgorithm a = algorithm.value_or(default_algorithm_);
  MPI_Comm comm = collective_comm_;
  const int size = size_, servers = param_servers_;
  const double emulated_s = emulated_all_reduce_seconds(link_, a, n, size, servers);
  return submit("all_reduce[" + algorithm_name(a) + "," + reduce_op_name(op) + "]", n, [=]() {
    const auto start = std::chrono::steady_clock::now();
    switch (a) {
      case AllReduceAlgorithm::Mpi:
        all_reduce_in_place(data, n, MPI_FLOAT, mpi_op(op), comm);
        break;
      case AllReduceAlgorithm::Ring: ring_all_reduce(comm, data, n, op); break;
      case AllReduceAlgorithm::Tree: tree_all_reduce(comm, data, n, op); break;
      case AllReduceAlgorithm::Rhd: rhd_all_reduce(comm, data, n, op); break;
      case AllReduceAlgorithm::ParamServer: param_server_all_reduce(comm, data, n, op, servers); break;
    }
    finish_reduction(data, n, op, size);
    last_at_least(start, emulated_s);
  });
}

void ProcessGroup::all_reduce(float* data, int64_t n, ReduceOp op, std::optional<AllReduceAlgorithm> algorithm) {
  all_reduce_async(data, n, op, algorithm).wait();
}

void ProcessGroup::all_reduce(Tensor& t, ReduceOp op, std::optional<AllReduceAlgorithm> algorithm) {
  all_reduce(t.f32(), t.numel(), op, algorithm);
}

Work ProcessGroup::reduce_scatter_async(const float* in, float* out, int64_t n, ReduceOp op,
                                        AllReduceAlgorithm algorithm) {
  check(algorithm == AllReduceAlgorithm::Mpi || algorithm == AllReduceAlgorithm::Ring,
        "reduce_scatter supports the 'mpi' and 'ring' algorithms, not '", algorithm_name(algorithm), "'");
  if (single_process_) return copy_locally(in, out, 4 * n);
  MPI_Comm comm = collective_comm_;
  const int size = size_, rank = rank_;
  const bool in_place = out == in + rank * n;
  const double emulated_s = emulated_ring_half_seconds(link_, n * size, size);
  return submit("reduce_scatter[" + algorithm_name(algorithm) + "]", n, [=]() {
    const auto start = std::chrono::steady_clock::now();
    if (in_place) {
      float* data = out - rank * n;
      if (algorithm == AllReduceAlgorithm::Mpi) {
        // MPI puts an in-place result at the front of the buffer; move it to this rank's chunk.
        reduce_scatter_block(MPI_IN_PLACE, data, n, MPI_FLOAT, mpi_op(op), comm);
        // (n == 0: both pointers may be null, which memmove does not allow even for 0 bytes.)
        if (rank != 0 && n > 0) std::memmove(out, data, sizeof(float) * static_cast<size_t>(n));
      } else {
        ring_reduce_scatter(comm, data, n * size, op);
      }
    } else if (algorithm == AllReduceAlgorithm::Mpi) {
      reduce_scatter_block(in, out, n, MPI_FLOAT, mpi_op(op), comm);
    } else {
      std::vector<float> work(in, in + n * size);  // (size * n) the ring reduces in place
      ring_reduce_scatter(comm, work.data(), n * size, op);
      if (n > 0) std::memcpy(out, work.data() + rank * n, sizeof(float) * static_cast<size_t>(n));
    }
    finish_reduction(out, n, op, size);
    last_at_least(start, emulated_s);
  }, n * size);
}

void ProcessGroup::reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op, AllReduceAlgorithm algorithm) {
  check(in.numel() == out.numel() * size_, "reduce_scatter: input of ", in.numel(), " elements must be ", size_,
        " x output (", out.numel(), ")");
  reduce_scatter_async(in.f32(), out.f32(), out.numel(), op, algorithm).wait();
}

Work ProcessGroup::all_gather_async(const float* in, float* out, int64_t n, AllReduceAlgorithm algorithm) {
  check(algorithm == AllReduceAlgorithm::Mpi || algorithm == AllReduceAlgorithm::Ring,
        "all_gather supports the 'mpi' and 'ring' algorithms, not '", algorithm_name(algorithm), "'");
  if (single_process_) return copy_locally(in, out, 4 * n);
  MPI_Comm comm = collective_comm_;
  const int size = size_, rank = rank_;
  const bool in_place = in == out + rank * n;
  const double emulated_s = emulated_ring_half_seconds(link_, n * size, size);
  return submit("all_gather[" + algorithm_name(algorithm) + "]", n, [=]() {
    const auto start = std::chrono::steady_clock::now();
    if (algorithm == AllReduceAlgorithm::Mpi) {
      all_gather_block(in_place ? MPI_IN_PLACE : in, out, n, MPI_FLOAT, comm);
    } else {
      if (!in_place) std::memmove(out + rank * n, in, sizeof(float) * static_cast<size_t>(n));
      ring_all_gather(comm, out, n * size);
    }
    last_at_least(start, emulated_s);
  }, n * size);
}

void ProcessGroup::queue_after(const Work& before, std::function<void()> prepare) {
  if (single_process_) {  // no queue: the caller's next call runs at once
    before.wait();
    if (prepare) prepare();
    return;
  }
  // Not a collective (no counters, no call check): every rank queues it at the same place
  // anyway, and a stuck `before` is watched through its own handle.
  thread_->submit("after " + before.description(), [before, prepare = std::move(prepare)] {
    before.wait();
    if (prepare) prepare();
  });
}

void ProcessGroup::all_gather(const Tensor& in, Tensor& out, AllReduceAlgorithm algorithm) {
  check(out.numel() == in.numel() * size_, "all_gather: output of ", out.numel(), " elements must be ", size_,
        " x input (", in.numel(), ")");
  all_gather_async(in.f32(), out.f32(), in.numel(), algorithm).wait();
}

Work ProcessGroup::all_reduce_bf16_async(float* data, int64_t n, ReduceOp op) {
  MPI_Comm comm = collective_comm_;
  const int size = size_;
  const bool single = single_process_;
  const double emulated_s = emulated_all_reduce_seconds(link_, AllReduceAlgorithm::Mpi, n, size, 1, 2);
  auto body = [=]() {
    const auto start = std::chrono::steady_clock::now();
    std::vector<bfloat16> wire = to_bf16_vector(data, n);
    if (!single)
      all_reduce_in_place(wire.data(), n, bf16_mpi_type(), bf16_mpi_op(op), comm);
    widen_bf16(wire.data(), data, n);
    finish_reduction(data, n, op, size);
    last_at_least(start, emulated_s);
  };
  if (single) {  // one rank: its data, rounded as it would be sent
    body();
    return Work::completed();
  }
  return submit("all_reduce_bf16[mpi," + reduce_op_name(op) + "]", n, body, n, 2);
}

Work ProcessGroup::reduce_scatter_bf16_async(const float* in, float* out, int64_t n, ReduceOp op) {
  MPI_Comm comm = collective_comm_;
  const int size = size_;
  const bool single = single_process_;
  const double emulated_s = emulated_ring_half_seconds(link_, n * size, size, 2);
  auto body = [=]() {
    const auto start = std::chrono::steady_clock::now();
    std::vector<bfloat16> wire = to_bf16_vector(in, n * size);
    if (!single)
      reduce_scatter_block(MPI_IN_PLACE, wire.data(), n, bf16_mpi_type(), bf16_mpi_op(op), comm);
    widen_bf16(wire.data(), out, n);  // in place, MPI leaves this rank's result at the front
    finish_reduction(out, n, op, size);
    last_at_least(start, emulated_s);
  };
  if (single) {
    body();
    return Work::completed();
  }
  return submit("reduce_scatter_bf16[mpi]", n, body, n * size, 2);
}

Work ProcessGroup::all_gather_bf16_async(const bfloat16* in, bfloat16* out, int64_t n) {
  if (single_process_) return copy_locally(in, out, 2 * n);
  MPI_Comm comm = collective_comm_;
  const bool in_place = in == out + rank_ * n;
  const double emulated_s = emulated_ring_half_seconds(link_, n * size_, size_, 2);
  return submit("all_gather_bf16[mpi]", n, [=]() {
    const auto start = std::chrono::steady_clock::now();
    all_gather_block(in_place ? MPI_IN_PLACE : in, out, n, bf16_mpi_type(), comm);
    last_at_least(start, emulated_s);
  }, n * size_, 2);
}

// One broadcast for floats and bytes: they differ only in the element type.
Work ProcessGroup::broadcast_typed(void* data, int64_t n, int root, MPI_Datatype type, const char* op, int element_bytes) {
  check(root >= 0 && root < size_, "broadcast root ", root, " is not a rank of group '", name_, "' (size ", size_, ")");
  if (single_process_) return Work::completed();
  MPI_Comm comm = collective_comm_;
  return submit(op, n, [=]() {
    comm::broadcast(data, n, type, root, comm);
  }, -1, element_bytes);
}

Work ProcessGroup::broadcast_async(float* data, int64_t n, int root) {
  return broadcast_typed(data, n, root, MPI_FLOAT, "broadcast", 4);
}

void ProcessGroup::broadcast(Tensor& t, int root) { broadcast_async(t.f32(), t.numel(), root).wait(); }

Work ProcessGroup::reduce_async(float* data, int64_t n, int root, ReduceOp op) {
  check(root >= 0 && root < size_, "reduce root ", root, " is not a rank of group '", name_, "' (size ", size_, ")");
  if (single_process_) return Work::completed();
  MPI_Comm comm = collective_comm_;
  const int rank = rank_, size = size_;
  return submit("reduce", n, [=]() {
    check_mpi(MPI_Reduce(rank == root ? MPI_IN_PLACE : data, data, mpi_count(n), MPI_FLOAT, mpi_op(op), root, comm),
              "MPI_Reduce");
    if (rank == root) finish_reduction(data, n, op, size);
  });
}

void ProcessGroup::reduce(Tensor& t, int root, ReduceOp op) { reduce_async(t.f32(), t.numel(), root, op).wait(); }

Work ProcessGroup::all_to_all_async(const float* in, float* out, int64_t n) {
  if (single_process_) return copy_locally(in, out, 4 * n);
  MPI_Comm comm = collective_comm_;
  return submit("all_to_all", n, [=]() {
    all_to_all_block(in, out, n, MPI_FLOAT, comm);
  });
}

void ProcessGroup::all_to_all(const Tensor& in, Tensor& out) {
  check(in.numel() == out.numel() && in.numel() % size_ == 0, "all_to_all: input (", in.numel(), ") and output (",
        out.numel(), ") must be equal multiples of the group size ", size_);
  all_to_all_async(in.f32(), out.f32(), in.numel() / size_).wait();
}

void ProcessGroup::all_to_all_v(const Tensor& in, const std::vector<int64_t>& send_counts, Tensor& out,
                                const std::vector<int64_t>& recv_counts) {
  const int64_t sent = std::accumulate(send_counts.begin(), send_counts.end(), int64_t{0});
  const int64_t received = std::accumulate(recv_counts.begin(), recv_counts.end(), int64_t{0});
  check(sent == in.numel() && received == out.numel(), "all_to_all_v: counts (", sent, " sent, ", received,
        " received) do not match the tensors (", in.numel(), ", ", out.numel(), ")");
  all_to_all_v_async(in.f32(), send_counts, out.f32(), recv_counts).wait();
}

Work ProcessGroup::all_to_all_v_async(const float* in, std::vector<int64_t> send_counts, float* out,
                                      std::vector<int64_t> recv_counts) {
  return all_to_all_v_typed(in, std::move(send_counts), out, std::move(recv_counts), MPI_FLOAT, 4, "all_to_all_v");
}

Work ProcessGroup::all_to_all_v_bf16_async(const bfloat16* in, std::vector<int64_t> send_counts, bfloat16* out,
                                           std::vector<int64_t> recv_counts) {
  return all_to_all_v_typed(in, std::move(send_counts), out, std::move(recv_counts), bf16_mpi_type(), 2,
                            "all_to_all_v_bf16");
}

// One uneven all-to-all for floats and bf16: they differ only in the element type.
Work ProcessGroup::all_to_all_v_typed(const void* in, std::vector<int64_t> send_counts, void* out,
                                      std::vector<int64_t> recv_counts, MPI_Datatype type, int element_bytes,
                                      const char* op) {
  check(static_cast<int>(send_counts.size()) == size_ && static_cast<int>(recv_counts.size()) == size_,
        "all_to_all_v: need ", size_, " send and receive counts, got ", send_counts.size(), " and ", recv_counts.size());
  if (single_process_) return copy_locally(in, out, element_bytes * send_counts[0]);
  MPI_Comm comm = collective_comm_;
  const int64_t total = std::accumulate(send_counts.begin(), send_counts.end(), int64_t{0});
  return submit(op, -1, [=]() {
    std::vector<int> sc, sd, rc, rd;
    int64_t so = 0, ro = 0;
    for (size_t q = 0; q < send_counts.size(); ++q) {
      sc.push_back(mpi_count(send_counts[q]));
      sd.push_back(mpi_count(so));
      rc.push_back(mpi_count(recv_counts[q]));
      rd.push_back(mpi_count(ro));
      so += send_counts[q];
      ro += recv_counts[q];
    }
    comm::all_to_all_v(in, sc.data(), sd.data(), out, rc.data(), rd.data(), type, comm);
  }, total, element_bytes);
}

Work ProcessGroup::barrier_async() {
  if (single_process_) return Work::completed();
  MPI_Comm comm = collective_comm_;
  return submit("barrier", 0, [=]() { comm::barrier(comm); });
}

void ProcessGroup::barrier() { barrier_async().wait(); }

Work ProcessGroup::broadcast_bytes_async(void* data, int64_t n, int root) {
  return broadcast_typed(data, n, root, MPI_BYTE, "broadcast_bytes", 1);
}

Work ProcessGroup::all_gather_bytes_async(const void* in, void* out, int64_t n) {
  if (single_process_) return copy_locally(in, out, n);
  MPI_Comm comm = collective_comm_;
  return submit("all_gather_bytes", n, [=]() {
    check_mpi(MPI_Allgather(in, mpi_count(n), MPI_BYTE, out, mpi_count(n), MPI_BYTE, comm), "MPI_Allgather");
  }, n * size_, 1);
}

Work ProcessGroup::gather_v_bytes_async(const void* in, std::vector<int64_t> counts, void* out, std::optional<int> root) {
  check(static_cast<int>(counts.size()) == size_, "gather_v_bytes: need ", size_, " counts, got ", counts.size());
  check(!root || (*root >= 0 && *root < size_), "gather root ", root.value_or(-1), " is not a rank of group '", name_,
        "' (size ", size_, ")");
  if (single_process_) return copy_locally(in, out, counts[0]);
  MPI_Comm comm = collective_comm_;
  const int rank = rank_;
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  mpi_count(total);  // every displacement fits MPI's int
  return submit(root ? "gather_v_bytes" : "all_gather_v_bytes", total, [=]() {
    std::vector<int> sizes, offsets;
    for (int64_t q = 0, offset = 0; q < static_cast<int64_t>(counts.size()); offset += counts[q++]) {
      sizes.push_back(mpi_count(counts[q]));
      offsets.push_back(mpi_count(offset));
    }
    const int mine = sizes[static_cast<size_t>(rank)];
    if (root)
      check_mpi(MPI_Gatherv(in, mine, MPI_BYTE, out, sizes.data(), offsets.data(), MPI_BYTE, *root, comm), "MPI_Gatherv");
    else
      check_mpi(MPI_Allgatherv(in, mine, MPI_BYTE, out, sizes.data(), offsets.data(), MPI_BYTE, comm), "MPI_Allgatherv");
  }, -1, 1);
}

Work ProcessGroup::post_p2p(bool send, void* data, int64_t n, MPI_Datatype type, int element_bytes, int peer, int tag) {
  const char* what = send ? "send" : "recv";
  check(!single_process_, send ? "send to" : "receive from", " another rank on the single-process group '", name_, "'");
  check(peer >= 0 && peer < size_, what, send ? " to rank " : " from rank ", peer, " outside group '", name_, "' (size ",
        size_, ")");
  MPI_Request request;
  if (send) {
    check_mpi(MPI_Isend(data, mpi_count(n), type, peer, tag, p2p_comm_, &request), "MPI_Isend");
    counters_->sent_bytes += element_bytes * n;
  } else {
    check_mpi(MPI_Irecv(data, mpi_count(n), type, peer, tag, p2p_comm_, &request), "MPI_Irecv");
  }
  const std::string values = std::to_string(n) + (element_bytes == 2 ? " bf16" : " floats");
  return transfer(Work::from_request(request, std::string(what) + "(" + values + (send ? ") to " : ") from ") +
                                                  std::to_string(peer) + " on group '" + name_ + "'"),
                  peer);
}

Work ProcessGroup::send_async(const float* data, int64_t n, int dst, int tag) {
  return post_p2p(true, const_cast<float*>(data), n, MPI_FLOAT, 4, dst, tag);
}

Work ProcessGroup::recv_async(float* data, int64_t n, int src, int tag) {
  return post_p2p(false, data, n, MPI_FLOAT, 4, src, tag);
}

Work ProcessGroup::send_bf16_async(const bfloat16* data, int64_t n, int dst, int tag) {
  return post_p2p(true, const_cast<bfloat16*>(data), n, bf16_mpi_type(), 2, dst, tag);
}

Work ProcessGroup::recv_bf16_async(bfloat16* data, int64_t n, int src, int tag) {
  return post_p2p(false, data, n, bf16_mpi_type(), 2, src, tag);
}

void ProcessGroup::send(const Tensor& t, int dst, int tag) { send_async(t.f32(), t.numel(), dst, tag).wait(); }
void ProcessGroup::recv(Tensor& t, int src, int tag) { recv_async(t.f32(), t.numel(), src, tag).wait(); }

std::unique_ptr<ProcessGroup> ProcessGroup::split(int color, int key, std::string name) {
  if (single_process_) return single_process(std::move(name));
  MPI_Comm sub = MPI_COMM_NULL;
  // Issued through the thread so it stays ordered with this group's queued collectives.
  MPI_Comm comm = collective_comm_;
  stop_for_a_test("split");
  // MPI_Comm_split and the new group's MPI_Comm_dup block until every member arrives, where
  // the watchdog cannot poll: a deadline ends the job instead of a silent hang.
  std::unique_ptr<ProcessGroup> group;
  {
    const StartupWatch watch(timeout_s_, "creating group '" + name + "' from '" + name_ + "' (MPI_Comm_split)");
    submit("split", 0, [&]() { check_mpi(MPI_Comm_split(comm, color, key, &sub), "MPI_Comm_split"); }).wait();
    group = std::make_unique<ProcessGroup>(sub, std::move(name));
  }
  MPI_Comm_free(&sub);
  // A group made from this one is watched like it: the trainer sets the world's timeout once.
  group->timeout_s_ = timeout_s_;
  group->debug_checks_ = debug_checks_;
  return group;
}

}  // namespace loom::comm
