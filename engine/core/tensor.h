// A tensor: a shape, a dtype and a span of memory owned by a Buffer that a Backend allocated.
// Model code never touches memory directly; it passes tensors to backend ops, so the same code
// runs when the backend's memory is on a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/dtype.h"

namespace manyshot {

enum class Device : uint8_t { kCPU = 0, kCUDA = 1 };

// Memory from one backend's allocator; frees itself through the deleter it was given.
class Buffer {
 public:
  Buffer(void* data, size_t bytes, Device device, std::function<void(void*, size_t)> free)
      : data_(data), bytes_(bytes), device_(device), free_(std::move(free)) {}
  ~Buffer() {
    if (free_) free_(data_, bytes_);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* data_;
  size_t bytes_;
  Device device_;
  std::function<void(void*, size_t)> free_;
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(std::shared_ptr<Buffer> buffer, DType dtype, std::vector<int64_t> shape,
         size_t byte_offset = 0)
      : buffer_(std::move(buffer)), dtype_(dtype), shape_(std::move(shape)), offset_(byte_offset) {}

  bool defined() const { return buffer_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const { return buffer_ ? buffer_->device() : Device::kCPU; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim(size_t i) const { return shape_[i]; }
  size_t rank() const { return shape_.size(); }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape_) n *= d;
    return n;
  }
  size_t bytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype_); }

  void* raw() const { return static_cast<std::byte*>(buffer_->data()) + offset_; }
  template <typename T>
  T* data() const {
    return static_cast<T*>(raw());
  }

  // A view sharing memory: rows [begin, end) of the first dimension.
  Tensor Rows(int64_t begin, int64_t end) const {
    std::vector<int64_t> shape = shape_;
    shape[0] = end - begin;
    return Tensor(buffer_, dtype_, std::move(shape),
                  offset_ + static_cast<size_t>(begin) * RowBytes());
  }
  // A view with the same elements in another shape (numel must match).
  Tensor Reshape(std::vector<int64_t> shape) const {
    return Tensor(buffer_, dtype_, std::move(shape), offset_);
  }
  size_t RowBytes() const { return shape_.empty() ? 0 : bytes() / static_cast<size_t>(shape_[0]); }

  std::string ShapeString() const;
  // The memory this tensor views (shared by its views): a holder of a weak_ptr to it learns when
  // the memory was freed (a recording of ops that read it is then stale).
  const std::shared_ptr<Buffer>& buffer() const { return buffer_; }

 private:
  std::shared_ptr<Buffer> buffer_;
  DType dtype_ = DType::kF32;
  std::vector<int64_t> shape_;
  size_t offset_ = 0;
};

}  // namespace manyshot
