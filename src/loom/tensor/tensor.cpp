#include "loom/tensor/tensor.hpp"

#include <cstdlib>
#include <cstring>
#include <new>

#include "loom/error.hpp"
#include "loom/tensor/allocator.hpp"

namespace loom {

std::string shape_str(const Shape& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    check(d >= 0, "negative dimension in shape ", shape_str(shape));
    n *= d;
  }
  return n;
}

Storage::Storage(int64_t bytes, MemoryCategory category) : bytes_(bytes), category_(category) {
  data_ = allocate_block(bytes);
  if (data_ == nullptr) fail("out of memory allocating ", format_bytes(bytes), " for ", category_name(category));
  MemoryTracker::instance().on_alloc(category_, bytes_);
}

Storage::~Storage() {
  MemoryTracker::instance().on_free(category_, bytes_);
  free_block(data_, bytes_);
}

Tensor Tensor::empty(const Shape& shape, DType dtype, MemoryCategory category) {
  Tensor t;
  t.shape_ = shape;
  t.numel_ = shape_numel(shape);
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(t.nbytes(), category);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, MemoryCategory category) {
  Tensor t = empty(shape, dtype, category);
  t.zero_();
  return t;
}

int64_t Tensor::size(int i) const {
  const int n = ndim();
  const int j = i < 0 ? i + n : i;
  check(j >= 0 && j < n, "dimension ", i, " out of range for shape ", shape_str(shape_));
  return shape_[j];
}

MemoryCategory Tensor::category() const {
  check(defined(), "category() of an undefined tensor");
  return storage_->category();
}

void* Tensor::raw() const {
  check(defined(), "data access to an undefined tensor");
  return static_cast<char*>(storage_->data()) + offset_bytes_;
}

float* Tensor::f32() const {
  check(dtype_ == DType::F32, "expected an f32 tensor, got ", dtype_name(dtype_));
  return static_cast<float*>(raw());
}

bfloat16* Tensor::bf16() const {
  check(dtype_ == DType::BF16, "expected a bf16 tensor, got ", dtype_name(dtype_));
  return static_cast<bfloat16*>(raw());
}

int32_t* Tensor::i32() const {
  check(dtype_ == DType::I32, "expected an i32 tensor, got ", dtype_name(dtype_));
  return static_cast<int32_t*>(raw());
}

Tensor Tensor::view(const Shape& shape) const {
  check(shape_numel(shape) == numel_, "cannot view ", shape_str(shape_), " as ", shape_str(shape));
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::narrow(int64_t start, int64_t count) const {
  check(ndim() >= 1 && start >= 0 && count >= 0 && start + count <= shape_[0], "narrow(", start, ", ",
        count, ") out of range for shape ", shape_str(shape_));
  Tensor t = *this;
  const int64_t row = numel_ / (shape_[0] == 0 ? 1 : shape_[0]);
  t.shape_[0] = count;
  t.numel_ = row * count;
  t.offset_bytes_ += start * row * static_cast<int64_t>(dtype_size(dtype_));
  return t;
}

Tensor Tensor::clone(MemoryCategory category) const {
  Tensor t = empty(shape_, dtype_, category);
  t.copy_from(*this);
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  check(src.numel_ == numel_ && src.dtype_ == dtype_, "copy_from: ", shape_str(src.shape_), " ",
        dtype_name(src.dtype_), " into ", shape_str(shape_), " ", dtype_name(dtype_));
  if (numel_ > 0) std::memcpy(raw(), src.raw(), static_cast<size_t>(nbytes()));
}

void Tensor::zero_() {
  if (numel_ > 0) std::memset(raw(), 0, static_cast<size_t>(nbytes()));
}

void Tensor::fill_(float value) {
  float* p = f32();
  for (int64_t i = 0; i < numel_; ++i) p[i] = value;
}

}  // namespace loom
