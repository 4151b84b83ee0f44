// Storage and Tensor: reference-counted device memory, and strided views over it.
//
// A Tensor is a cheap handle (shared_ptr) to a TensorImpl: storage + sizes + strides + offset +
// dtype. View operations (view, transpose, permute, slice, expand, squeeze, unsqueeze, select,
// as_strided) only make new metadata over the same storage and live here. Operations that touch
// data (contiguous, clone, to, copy_, fill_, item) go through the dispatcher and are implemented
// in engine/ops/tensor_methods.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "engine/core/allocator.h"
#include "engine/core/device.h"
#include "engine/core/error.h"
#include "engine/core/scalar.h"
#include "engine/core/scalar_type.h"
#include "engine/core/small_vector.h"

namespace tb::core {

/// Reference-counted bytes on one device.
class StorageImpl {
 public:
  StorageImpl(DataPtr data, std::size_t nbytes) : data_(std::move(data)), nbytes_(nbytes) {}
  void* data() const noexcept { return data_.get(); }
  std::size_t nbytes() const noexcept { return nbytes_; }
  Device device() const noexcept { return data_.device(); }

 private:
  DataPtr data_;
  std::size_t nbytes_;
};

using Storage = std::shared_ptr<StorageImpl>;

/// Allocates `nbytes` on `device` through that device type's registered allocator.
Storage make_storage(std::size_t nbytes, Device device);

/// Hook for the autograd layer: per-tensor metadata it attaches (grad, grad_fn, ...).
/// core only stores it; engine/autograd defines the concrete type.
class AutogradMetaInterface {
 public:
  virtual ~AutogradMetaInterface() = default;
};

/// The shared state behind a Tensor handle.
struct TensorImpl {
  Storage storage;
  DimVector sizes;
  DimVector strides;        // in elements
  std::int64_t offset = 0;  // in elements
  ScalarType dtype = ScalarType::Float32;
  Device device;
  bool requires_grad = false;
  std::uint32_t version = 0;  // bumped by in-place ops (autograd checks it)
  std::shared_ptr<AutogradMetaInterface> autograd_meta;
};

/// Contiguous (row-major) strides for `sizes`.
DimVector contiguous_strides(IntList sizes);

/// Product of the sizes (1 for a 0-d shape). Throws tb::ValueError on negative sizes or overflow.
std::int64_t checked_numel(IntList sizes, const char* op);

/// A strided, typed view over a Storage. Copying a Tensor copies the handle, not the data.
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  /// Uninitialised tensor of the given shape on `device` (CPU memory is 64-byte aligned).
  static Tensor empty(IntList sizes, ScalarType dtype = ScalarType::Float32,
                      Device device = Device());
  static Tensor empty(std::initializer_list<std::int64_t> sizes,
                      ScalarType dtype = ScalarType::Float32, Device device = Device()) {
    return empty(IntList(sizes.begin(), sizes.size()), dtype, device);
  }

  bool defined() const noexcept { return impl_ != nullptr; }
  TensorImpl* impl() const noexcept { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const noexcept { return impl_; }
  /// True when both handles refer to the same TensorImpl.
  bool is_same(const Tensor& other) const noexcept { return impl_ == other.impl_; }

  IntList sizes() const { return checked().sizes.span(); }
  IntList strides() const { return checked().strides.span(); }
  /// Size of dimension `dim` (negative counts from the end). Throws tb::IndexError if out of range.
  std::int64_t size(std::int64_t dim) const;
  std::int64_t stride(std::int64_t dim) const;
  std::int64_t dim() const { return static_cast<std::int64_t>(checked().sizes.size()); }
  std::int64_t numel() const;
  std::int64_t storage_offset() const { return checked().offset; }
  ScalarType dtype() const { return checked().dtype; }
  Device device() const { return checked().device; }
  std::size_t element_size() const { return core::element_size(dtype()); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * element_size(); }
  const Storage& storage() const { return checked().storage; }
  bool is_contiguous() const;

  /// Pointer to the first element (storage data + offset). Valid on any device; dereference only
  /// on the CPU.
  void* data_ptr() const;
  /// Typed pointer; throws tb::TypeError if T does not match dtype().
  template <typename T>
  T* data_ptr() const {
    TB_CHECK_T(TypeError, scalar_type_of<T> == dtype(), "[tensor] data_ptr<",
               scalar_type_name(scalar_type_of<T>), "> called on a ", scalar_type_name(dtype()),
               " tensor");
    return static_cast<T*>(data_ptr());
  }

  bool requires_grad() const { return checked().requires_grad; }

  // ---- Views (metadata only; share storage) ---------------------------------------------------
  /// Same data with a new shape; one size may be -1 (inferred). Requires compatible strides;
  /// throws tb::ValueError suggesting reshape() otherwise.
  Tensor view(IntList sizes) const;
  Tensor view(std::initializer_list<std::int64_t> s) const {
    return view(IntList(s.begin(), s.size()));
  }
  /// view() when possible, else a contiguous copy with the new shape.
  Tensor reshape(IntList sizes) const;
  Tensor reshape(std::initializer_list<std::int64_t> s) const {
    return reshape(IntList(s.begin(), s.size()));
  }
  Tensor transpose(std::int64_t dim0, std::int64_t dim1) const;
  /// 2-D transpose (throws for other ranks).
  Tensor t() const;
  Tensor permute(IntList dims) const;
  Tensor permute(std::initializer_list<std::int64_t> d) const {
    return permute(IntList(d.begin(), d.size()));
  }
  /// Elements start, start+step, ... < end along `dim` (Python slicing; negative start/end count
  /// from the end and are clamped). step must be > 0.
  Tensor slice(std::int64_t dim, std::int64_t start, std::int64_t end, std::int64_t step = 1) const;
  Tensor narrow(std::int64_t dim, std::int64_t start, std::int64_t length) const;
  /// Removes `dim` by taking index `index` along it.
  Tensor select(std::int64_t dim, std::int64_t index) const;
  /// Broadcasts size-1 dims (stride 0) to `sizes`; -1 keeps a size; new leading dims allowed.
  Tensor expand(IntList sizes) const;
  Tensor expand(std::initializer_list<std::int64_t> s) const {
    return expand(IntList(s.begin(), s.size()));
  }
  Tensor squeeze() const;
  Tensor squeeze(std::int64_t dim) const;
  Tensor unsqueeze(std::int64_t dim) const;
  Tensor flatten(std::int64_t start_dim = 0, std::int64_t end_dim = -1) const;
  Tensor as_strided(IntList sizes, IntList strides, std::optional<std::int64_t> offset = {}) const;

  // ---- Data operations (dispatcher; implemented in engine/ops) --------------------------------
  /// This tensor if already contiguous, else a contiguous copy.
  Tensor contiguous() const;
  /// A contiguous copy on the same device.
  Tensor clone() const;
  /// Converted copy (returns *this when dtype and device already match and copy is false).
  Tensor to(ScalarType dtype, bool copy = false) const;
  Tensor to(Device device, bool copy = false) const;
  Tensor to(Device device, ScalarType dtype, bool copy = false) const;
  /// Copies `src` (broadcast to this shape, any dtype/device) into this tensor; returns *this.
  Tensor& copy_(const Tensor& src);
  Tensor& fill_(const Scalar& value);
  Tensor& zero_();
  /// The value of a one-element tensor, converted to double.
  double item() const;
  /// All elements in row-major order converted to T (copies to the CPU if needed).
  template <typename T>
  std::vector<T> to_vector() const;

  std::string str() const;  ///< "Tensor[2, 3] float32 cpu" plus values when small

 private:
  TensorImpl& checked() const {
    TB_CHECK(impl_ != nullptr, "[tensor] operation on an undefined tensor");
    return *impl_;
  }
  std::shared_ptr<TensorImpl> impl_;
};

/// Broadcast shape of two shapes (NumPy rules). Throws tb::ValueError naming `op` and both
/// shapes when they are incompatible.
DimVector broadcast_shapes(IntList a, IntList b, const char* op);

/// Wraps a dimension index: -1 is the last; throws tb::IndexError naming op, dim and rank.
std::int64_t wrap_dim(std::int64_t dim, std::int64_t rank, const char* op);

/// Makes a tensor from values (copied) with the given shape on the CPU.
template <typename T>
Tensor from_vector(const std::vector<T>& values, IntList sizes);
template <typename T>
Tensor from_vector(const std::vector<T>& values, std::initializer_list<std::int64_t> sizes) {
  return from_vector(values, IntList(sizes.begin(), sizes.size()));
}
template <typename T>
Tensor from_vector(const std::vector<T>& values) {
  const std::int64_t n = static_cast<std::int64_t>(values.size());
  return from_vector(values, IntList(&n, 1));
}

std::ostream& operator<<(std::ostream& os, const Tensor& t);

}  // namespace tb::core

namespace tb {
using core::Device;
using core::DeviceType;
using core::Scalar;
using core::ScalarType;
using core::Tensor;
}  // namespace tb
