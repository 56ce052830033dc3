// Activations on the wire: the collectives and transfers of model parallelism (tensor and
// sequence parallelism, pipeline stages, the context-parallel ring, expert all-to-alls, the
// 3D grid) move activations and activation gradients in their group's activation dtype
// (ProcessGroup::set_activation_dtype, which the parallelize recipe sets to bf16 on the
// model-parallel groups of a bf16 run, as Megatron-LM moves them in its params_dtype).
//   fp32: the group's plain fp32 call, so an fp32 run's bits are those it always had.
//   bf16: the tensors in memory stay fp32; each value is rounded to bf16 (nearest even) when
//         packed for the wire and widened back when unpacked, half the bytes; a sum adds two
//         bf16 values in fp32 and rounds back at every hop (bf16_wire.hpp), as NCCL's bf16
//         reductions do. The group's counters count 2 bytes a value.
// Loss and statistics reductions (the vocabulary-parallel cross-entropy's max and sum, the
// gradient norm) and gradient reductions are not activations: they call the group directly.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/comm/process_group.hpp"
#include "loom/tensor/tensor.hpp"

namespace loom::comm {

// Bytes n activation values take on g's wire.
int64_t activation_wire_bytes(const ProcessGroup& g, int64_t n);

// data (n) becomes the sum over g's ranks; the returned handle completes it.
Work sum_activations_async(ProcessGroup& g, float* data, int64_t n);
void sum_activations(ProcessGroup& g, Tensor& t);
// in (n) on every rank -> out (size x n): every rank's in, in rank order. The async form
// reads in when called and has written out when the handle's wait() returns.
void gather_activations(ProcessGroup& g, const Tensor& in, Tensor& out);
Work gather_activations_async(ProcessGroup& g, const float* in, float* out, int64_t n);
// The same gather queued behind `before` (an operation of another group that writes in):
// in is read once before has completed, and the caller does not wait for either.
Work gather_activations_after(ProcessGroup& g, const Work& before, const float* in, float* out, int64_t n);
// The same for values already in bf16 (a bf16 run's kept activations): gathered as they are,
// 2 bytes a value, exact whatever g's activation dtype. in and out must live until the wait.
Work gather_activations_async(ProcessGroup& g, const bfloat16* in, bfloat16* out, int64_t n);
// in (size x n) on every rank -> out (n): the sum of everyone's chunk `rank`.
void reduce_scatter_activations(ProcessGroup& g, const Tensor& in, Tensor& out);
Work reduce_scatter_activations_async(ProcessGroup& g, const float* in, float* out, int64_t n);
// Uneven all-to-all of rows (counts in values, as ProcessGroup::all_to_all_v).
void all_to_all_v_activations(ProcessGroup& g, const Tensor& in, const std::vector<int64_t>& send_counts, Tensor& out,
                              const std::vector<int64_t>& recv_counts);
// Uneven all-gather: rank q gives counts[q] values (the same counts on every rank) -> out
// (their sum): every rank's, in rank order; in bf16 a rank's own values are rounded too, so
// every rank holds the same bits.
void all_gather_v_activations(ProcessGroup& g, const Tensor& in, const std::vector<int64_t>& counts, Tensor& out);
// Point-to-point: data is read when the send is posted (bf16: packed then) and written when
// the receive's wait() returns (bf16: widened then).
Work send_activations_async(ProcessGroup& g, const float* data, int64_t n, int dst, int tag);
Work recv_activations_async(ProcessGroup& g, float* data, int64_t n, int src, int tag);

}  // namespace loom::comm
