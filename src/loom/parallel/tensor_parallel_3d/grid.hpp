// The process grid of 3D tensor parallelism (AxoNN, Singh et al. 2022): R x C x D ranks with
// a row, a column and a depth axis, each a group of the device mesh. A layer's matrix is split
// over two axes (one per matrix dimension) and each block further over depth, like FSDP; the
// collectives below are the only ones such a layer needs, each along one axis. The grid holds
// no tensors: a GPT linear layer (linear_3d.hpp) and a GCN layer use it alike.
#pragma once

#include <functional>
#include <string>

#include "loom/comm/process_group.hpp"
#include "loom/tensor/tensor.hpp"

namespace loom::parallel::tp3d {

enum class Axis { Row, Col, Depth };

std::string axis_name(Axis a);  // "row", "col", "depth" (the mesh's names)

class Grid3D {
 public:
  // Groups are passed in (the mesh's "row", "col" and "depth" axes); the grid keeps references.
  Grid3D(comm::ProcessGroup& row, comm::ProcessGroup& col, comm::ProcessGroup& depth) : row_(row), col_(col), depth_(depth) {}

  comm::ProcessGroup& group(Axis a) const;
  int size(Axis a) const { return group(a).size(); }
  int rank(Axis a) const { return group(a).rank(); }
  // This rank's position in the grid, depth slowest and col fastest (the mesh's order).
  int grid_rank() const;
  int grid_size() const { return size(Axis::Row) * size(Axis::Col) * size(Axis::Depth); }
  std::string describe() const;  // "row 2 x col 2 x depth 2"

  // Sum (in rank order, so every member gets the same bits) of partial results over `a`.
  void all_reduce(Tensor& t, Axis a) const;
  // The same for activations and their gradients: in the axis group's activation dtype
  // (comm/activation_wire.hpp; bf16 in a bf16 run). Feature gathers move activations too.
  void sum_activations(Tensor& t, Axis a) const;
  // Features (last dim, in `blocks` equal blocks, each split size(a) ways): this rank's slice
  // -> the whole, and back (a local copy, no communication).
  Tensor gather_features(const Tensor& local, Axis a, int64_t blocks = 1) const;
  Tensor slice_features(const Tensor& full, Axis a, int64_t blocks = 1) const;

  // FSDP over depth of a block (rows, cols) whose rows form `blocks` equal blocks: depth rank k
  // holds rows [k, k + 1) * rows / (blocks * D) of every block. all_gather_depth: shard
  // (rows / D, cols) -> block (rows, cols), in the shard's dtype (a bf16 run gathers the bf16
  // copy of its weight shard, as ZeRO-3 does; the fp32 master stays sharded), which the GEMMs
  // take as they are; reduce_scatter_depth: this rank's block gradient (partial over the depth
  // ranks' batches) -> the mean of the depth ranks' gradients of this rank's shard, in fp32
  // always (gradients, as ZeRO reduces them).
  Tensor all_gather_depth(const Tensor& shard, int64_t blocks = 1) const;
  Tensor reduce_scatter_depth(const Tensor& block, int64_t blocks = 1) const;

 // The same collectives started now and completed later (the overlap of 3D tensor
  // parallelism, overlap_3d.hpp): the very calls the blocking ones make, so the same bits.
  // The buffers they use live in the handle until wait() returns the result.
  class Pending {
   public:
    Pending() = default;  // nothing in flight: wait() returns an empty tensor
    Tensor wait();
    bool active() const { return grid_ != nullptr; }

   private:
    friend class Grid3D;
    const Grid3D* grid_ = nullptr;
    comm::Work work_;
    std::function<Tensor()> finish_;  // after the collective: the result (a reorder, or the buffer)
  };
  Pending start_all_gather_depth(const Tensor& shard, int64_t blocks = 1) const;
  Pending start_reduce_scatter_depth(const Tensor& block, int64_t blocks = 1) const;
  Pending start_all_reduce(Tensor& t, Axis a) const;  // wait() returns t, summed
  Pending start_sum_activations(Tensor& t, Axis a) const;  // likewise, as sum_activations
  Pending start_sum_activations(float* data, int64_t n, Axis a) const;  // n floats summed in place; wait() returns nothing
  // gather_features of `local` queued behind `before` (a started collective of another axis
  // that writes local, such as its sum): neither is waited for here; wait() returns the whole.
  Pending start_gather_features_after(const Pending& before, const Tensor& local, Axis a, int64_t blocks = 1) const;

  // Seconds this rank waited for the grid's collectives since the last call (a blocking
  // collective's whole time, a started one's wait): the communication compute did not hide.
  double take_waited_seconds() const;
  // Adds a wait on 3D communication the grid did not run itself (the depth mean of the
  // replicated gradients, train/parallelize.cpp).
  void add_waited_seconds(double s) const { waited_s_ += s; }

 private:
  comm::ProcessGroup &row_, &col_, &depth_;
  mutable double waited_s_ = 0.0;
};

}  // namespace loom::parallel::tp3d
