// Tensor: a contiguous, row-major block of elements with a shape and a dtype, sharing
// reference-counted storage. Views (reshape, a range of rows) share the storage, which is
// how a flat buffer (a gradient bucket, a ZeRO shard) can back many parameters.
// Invariant: a tensor's elements are contiguous at data() .. data() + numel().
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "loom/tensor/dtype.hpp"
#include "loom/tensor/memory_tracker.hpp"

namespace loom {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& shape);
int64_t shape_numel(const Shape& shape);

// Owns one aligned allocation and reports it to the MemoryTracker for its lifetime.
class Storage {
 public:
  Storage(int64_t bytes, MemoryCategory category);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  int64_t bytes() const { return bytes_; }
  MemoryCategory category() const { return category_; }

 private:
  void* data_ = nullptr;
  int64_t bytes_ = 0;
  MemoryCategory category_;
};

class Tensor {
 public:
  Tensor() = default;

  // Uninitialised; the category defaults to the current MemoryScope's.
  static Tensor empty(const Shape& shape, DType dtype = DType::F32,
                      MemoryCategory category = current_memory_category());
  static Tensor zeros(const Shape& shape, DType dtype = DType::F32,
                      MemoryCategory category = current_memory_category());
  static Tensor empty_like(const Tensor& t) { return empty(t.shape(), t.dtype()); }
  static Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.dtype()); }

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  // Size of dimension i; negative i counts from the end.
  int64_t size(int i) const;
  int64_t numel() const { return numel_; }
  int64_t nbytes() const { return numel_ * static_cast<int64_t>(dtype_size(dtype_)); }
  DType dtype() const { return dtype_; }
  MemoryCategory category() const;

  float* f32() const;    // checked: the tensor is fp32
  bfloat16* bf16() const;  // checked: the tensor is bf16
  int32_t* i32() const;  // checked: the tensor is int32 (token ids)
  void* raw() const;

  // Same storage, new shape with the same element count.
  Tensor view(const Shape& shape) const;
  // Rows [start, start + count) of dimension 0, sharing storage.
  Tensor narrow(int64_t start, int64_t count) const;
  // A new tensor (own storage) with the same contents.
  Tensor clone(MemoryCategory category = current_memory_category()) const;
  void copy_from(const Tensor& src);
  void zero_();
  void fill_(float value);
  // True when both are views of the same storage.
  bool shares_storage(const Tensor& other) const { return storage_ == other.storage_; }

 private:
  std::shared_ptr<Storage> storage_;
  int64_t offset_bytes_ = 0;
  Shape shape_;
  int64_t numel_ = 0;
  DType dtype_ = DType::F32;
};

}  // namespace loom
