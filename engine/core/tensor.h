// Storage and Tensor: reference-counted device memory, and strided views over it.
//
// A Tensor is a cheap handle (shared_ptr) to a TensorImpl: storage + sizes + strides + offset +
// dtype. View operations (view, transpose, permute, slice, expand, squeeze, unsqueeze, select,
// as_strided) only make new metadata over the same storage and live here. Operations that touch
// data (contiguous, clone, to, copy_, fill_, item) go through the dispatcher and are implemented
// in engine/ops/tensor_ops.cpp.
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
  /// Takes ownership of `data`, which must hold at least `nbytes` bytes (not checked).
  StorageImpl(DataPtr data, std::size_t nbytes) : data_(std::move(data)), nbytes_(nbytes) {}
  /// Start of the bytes (null for an empty storage); owned by this StorageImpl.
  void* data() const noexcept { return data_.get(); }
  /// Size in bytes as requested (the allocator may have reserved more).
  std::size_t nbytes() const noexcept { return nbytes_; }
  /// The device the bytes live on.
  Device device() const noexcept { return data_.device(); }

 private:
  DataPtr data_;
  std::size_t nbytes_;
};

/// Shared ownership of a StorageImpl; tensors that view the same memory share one.
using Storage = std::shared_ptr<StorageImpl>;

/// Allocates `nbytes` on `device` through that device type's registered allocator. Throws what
/// get_allocator() and Allocator::allocate() throw (no backend; out of memory).
Storage make_storage(std::size_t nbytes, Device device);

/// Hook for the autograd layer: per-tensor metadata it attaches (grad, grad_fn, ...).
/// core only stores it; engine/autograd defines the concrete type.
class AutogradMetaInterface {
 public:
  virtual ~AutogradMetaInterface() = default;
};

/// The shared state behind a Tensor handle.
struct TensorImpl {
  Storage storage;                         ///< the memory viewed (shared with other views)
  DimVector sizes;                         ///< shape; one entry per dimension
  DimVector strides;                       ///< in elements, one per dimension
  std::int64_t offset = 0;                 ///< of the first element, in elements
  ScalarType dtype = ScalarType::Float32;  ///< element type
  Device device;                           ///< where `storage` lives
  bool requires_grad = false;              ///< whether autograd records ops on this tensor
  std::uint32_t version = 0;               ///< bumped by in-place ops (autograd checks it)
  std::shared_ptr<AutogradMetaInterface> autograd_meta;  ///< owned by autograd; null until set
};

/// What a view operation did, for the autograd layer to differentiate it. Filled by every view
/// method; only looked at when the base requires grad.
struct ViewRecord {
  /// The kind of view; the fields below that a kind uses are noted per kind.
  enum class Kind : std::uint8_t {
    Reshape,    ///< view/reshape/flatten/squeeze/unsqueeze (no fields)
    Transpose,  ///< dim0, dim1
    Permute,    ///< dims
    Expand,     ///< (no fields)
    Slice,      ///< dim, start, end, step
    Select,     ///< dim, index (in start)
    AsStrided,  ///< the view's own sizes/strides/offset
  };
  Kind kind = Kind::Reshape;  ///< which view operation
  std::int64_t dim0 = 0;      ///< Transpose dim0; Slice/Select dim
  std::int64_t dim1 = 0;      ///< Transpose dim1
  std::int64_t start = 0;     ///< Slice start; Select index
  std::int64_t end = 0;       ///< Slice end
  std::int64_t step = 1;      ///< Slice step
  DimVector dims;             ///< Permute order
};

/// Called for every view whose base requires grad: the autograd layer connects `view` to the
/// graph (or clears its requires_grad when grad mode is off). Installed once by engine/autograd.
using ViewHook = void (*)(const class Tensor& base, class Tensor& view, const ViewRecord& record);
/// Installs the view hook (engine/autograd does this; there is one hook per process).
void set_view_hook(ViewHook hook);

/// Contiguous (row-major) strides for `sizes`.
DimVector contiguous_strides(IntList sizes);

/// Product of the sizes (1 for a 0-d shape). Throws tb::ValueError on negative sizes or overflow.
std::int64_t checked_numel(IntList sizes, const char* op);

/// A strided, typed view over a Storage. Copying a Tensor copies the handle, not the data.
class Tensor {
 public:
  /// An undefined tensor (no TensorImpl); most accessors throw tb::ValueError on it.
  Tensor() = default;
  /// A handle sharing `impl` (may be null, giving an undefined tensor).
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  /// Uninitialised tensor of the given shape on `device` (CPU memory is 64-byte aligned).
  /// Throws tb::ValueError for negative sizes or too many elements, and what the allocator
  /// throws (no backend for the device; out of memory).
  static Tensor empty(IntList sizes, ScalarType dtype = ScalarType::Float32,
                      Device device = Device());
  /// empty() with the shape as a braced list.
  static Tensor empty(std::initializer_list<std::int64_t> sizes,
                      ScalarType dtype = ScalarType::Float32, Device device = Device()) {
    return empty(IntList(sizes.begin(), sizes.size()), dtype, device);
  }

  /// False for a default-constructed (undefined) tensor.
  bool defined() const noexcept { return impl_ != nullptr; }
  /// The shared state (null when undefined); owned by the handles that share it.
  TensorImpl* impl() const noexcept { return impl_.get(); }
  /// The owning pointer to the shared state (null when undefined).
  const std::shared_ptr<TensorImpl>& impl_ptr() const noexcept { return impl_; }
  /// True when both handles refer to the same TensorImpl.
  bool is_same(const Tensor& other) const noexcept { return impl_ == other.impl_; }

  /// The shape: a view into the TensorImpl, valid while it lives and its sizes are not
  /// reassigned. Throws tb::ValueError on an undefined tensor, like the accessors below.
  IntList sizes() const { return checked().sizes.span(); }
  /// The strides in elements (same lifetime as sizes()).
  IntList strides() const { return checked().strides.span(); }
  /// Size of dimension `dim` (negative counts from the end). Throws tb::IndexError if out of range.
  std::int64_t size(std::int64_t dim) const;
  /// Stride of dimension `dim` in elements (negative dim counts from the end). Throws
  /// tb::IndexError if out of range.
  std::int64_t stride(std::int64_t dim) const;
  /// Number of dimensions (0 for a scalar tensor).
  std::int64_t dim() const { return static_cast<std::int64_t>(checked().sizes.size()); }
  /// Number of elements (product of the sizes; 1 for a 0-d tensor).
  std::int64_t numel() const;
  /// Offset of the first element into the storage, in elements.
  std::int64_t storage_offset() const { return checked().offset; }
  /// The element type.
  ScalarType dtype() const { return checked().dtype; }
  /// The device the storage lives on.
  Device device() const { return checked().device; }
  /// Bytes per element.
  std::size_t element_size() const { return core::element_size(dtype()); }
  /// numel() * element_size(): the logical size, not the storage's (differs for views).
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * element_size(); }
  /// The shared storage.
  const Storage& storage() const { return checked().storage; }
  /// True when the elements are laid out in row-major order without gaps (size-1 dimensions may
  /// have any stride; tensors with no elements are contiguous).
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

  /// Whether autograd records operations on this tensor.
  bool requires_grad() const { return checked().requires_grad; }

  // ---- Views (metadata only; share storage) ---------------------------------------------------
  /// Same data with a new shape; one size may be -1 (inferred). Requires compatible strides;
  /// throws tb::ValueError suggesting reshape() otherwise.
  Tensor view(IntList sizes) const;
  /// view() with the shape as a braced list.
  Tensor view(std::initializer_list<std::int64_t> s) const {
    return view(IntList(s.begin(), s.size()));
  }
  /// view() when possible, else a contiguous copy with the new shape.
  Tensor reshape(IntList sizes) const;
  /// reshape() with the shape as a braced list.
  Tensor reshape(std::initializer_list<std::int64_t> s) const {
    return reshape(IntList(s.begin(), s.size()));
  }
  /// Swaps dimensions `dim0` and `dim1` (negative counts from the end). Throws tb::IndexError
  /// if either is out of range.
  Tensor transpose(std::int64_t dim0, std::int64_t dim1) const;
  /// 2-D transpose (throws for other ranks).
  Tensor t() const;
  /// Reorders the dimensions: result dim i is this tensor's dim `dims[i]`. `dims` must name every
  /// dimension once; throws tb::ValueError (wrong count, repeats) or tb::IndexError (out of range).
  Tensor permute(IntList dims) const;
  /// permute() with the dims as a braced list.
  Tensor permute(std::initializer_list<std::int64_t> d) const {
    return permute(IntList(d.begin(), d.size()));
  }
  /// Elements start, start+step, ... < end along `dim` (Python slicing; negative start/end count
  /// from the end and are clamped). step must be > 0.
  Tensor slice(std::int64_t dim, std::int64_t start, std::int64_t end, std::int64_t step = 1) const;
  /// Elements [start, start + length) along `dim` (negative start counts from the end). Throws
  /// tb::IndexError when that range is not inside the dimension.
  Tensor narrow(std::int64_t dim, std::int64_t start, std::int64_t length) const;
  /// Removes `dim` by taking index `index` along it.
  Tensor select(std::int64_t dim, std::int64_t index) const;
  /// Broadcasts size-1 dims (stride 0) to `sizes`; -1 keeps a size; new leading dims allowed.
  Tensor expand(IntList sizes) const;
  /// expand() with the shape as a braced list.
  Tensor expand(std::initializer_list<std::int64_t> s) const {
    return expand(IntList(s.begin(), s.size()));
  }
  /// Removes every size-1 dimension.
  Tensor squeeze() const;
  /// Removes `dim` if its size is 1, else returns the same shape. Throws tb::IndexError if out of
  /// range.
  Tensor squeeze(std::int64_t dim) const;
  /// Inserts a size-1 dimension at `dim` (in [-dim()-1, dim()]). Throws tb::IndexError otherwise.
  Tensor unsqueeze(std::int64_t dim) const;
  /// Merges dimensions start_dim..end_dim (inclusive) into one; a 0-d tensor becomes shape [1].
  /// Copies, like reshape(), when a view is impossible. Throws tb::IndexError for out-of-range
  /// dims and tb::ValueError when start_dim comes after end_dim.
  Tensor flatten(std::int64_t start_dim = 0, std::int64_t end_dim = -1) const;
  /// A view with explicit sizes, strides (elements, >= 0) and storage offset (default: this
  /// tensor's). Throws tb::ValueError when the lengths differ, a value is negative, or the view
  /// would reach past the end of the storage.
  Tensor as_strided(IntList sizes, IntList strides, std::optional<std::int64_t> offset = {}) const;

  // ---- Data operations (dispatcher; implemented in engine/ops) --------------------------------
  /// This tensor if already contiguous, else a contiguous copy.
  Tensor contiguous() const;
  /// A contiguous copy on the same device.
  Tensor clone() const;
  /// Converted copy (returns *this when dtype and device already match and copy is false).
  Tensor to(ScalarType dtype, bool copy = false) const;
  /// Copy on `device` (returns *this when already there and copy is false).
  Tensor to(Device device, bool copy = false) const;
  /// Copy on `device` with `dtype` (returns *this when both match and copy is false).
  Tensor to(Device device, ScalarType dtype, bool copy = false) const;
  /// Copies `src` (broadcast to this shape, any dtype/device) into this tensor; returns *this.
  Tensor& copy_(const Tensor& src);
  /// Sets every element to `value` (converted to dtype()); returns *this.
  Tensor& fill_(const Scalar& value);
  /// Sets every element to 0; returns *this.
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
/// from_vector() with the shape as a braced list.
template <typename T>
Tensor from_vector(const std::vector<T>& values, std::initializer_list<std::int64_t> sizes) {
  return from_vector(values, IntList(sizes.begin(), sizes.size()));
}
/// A 1-D CPU tensor holding a copy of `values`.
template <typename T>
Tensor from_vector(const std::vector<T>& values) {
  const std::int64_t n = static_cast<std::int64_t>(values.size());
  return from_vector(values, IntList(&n, 1));
}

/// Writes t.str().
std::ostream& operator<<(std::ostream& os, const Tensor& t);

}  // namespace tb::core

namespace tb {
using core::Device;
using core::DeviceType;
using core::Scalar;
using core::ScalarType;
using core::Tensor;
}  // namespace tb
