// Tensor metadata: allocation, strides, and the view operations (no data is touched here).
#include "engine/core/tensor.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <numeric>

namespace tb::core {

Storage make_storage(std::size_t nbytes, Device device) {
  return std::make_shared<StorageImpl>(get_allocator(device.type()).allocate(nbytes, device),
                                       nbytes);
}

DimVector contiguous_strides(IntList sizes) {
  DimVector strides(sizes.size());
  std::int64_t s = 1;
  for (std::size_t i = sizes.size(); i-- > 0;) {
    strides[i] = s;
    s *= std::max<std::int64_t>(sizes[i], 1);
  }
  return strides;
}

std::int64_t checked_numel(IntList sizes, const char* op) {
  std::int64_t n = 1;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    TB_CHECK(sizes[i] >= 0, "[", op, "] negative size ", sizes[i], " at dimension ", i,
             " of shape ", DimVector(sizes));
    TB_CHECK(sizes[i] == 0 || n <= std::numeric_limits<std::int64_t>::max() / sizes[i], "[", op,
             "] shape ", DimVector(sizes), " has too many elements");
    n *= sizes[i];
  }
  return n;
}

std::int64_t wrap_dim(std::int64_t dim, std::int64_t rank, const char* op) {
  const std::int64_t r = std::max<std::int64_t>(rank, 1);  // 0-d tensors accept dim 0 and -1
  TB_CHECK_T(IndexError, dim >= -r && dim < r, "[", op, "] dimension ", dim,
             " out of range for a tensor of rank ", rank, " (expected in [", -r, ", ", r - 1, "])");
  return dim < 0 ? dim + r : dim;
}

DimVector broadcast_shapes(IntList a, IntList b, const char* op) {
  const std::size_t n = std::max(a.size(), b.size());
  DimVector out(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const std::int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    TB_CHECK(da == db || da == 1 || db == 1, "[", op, "] shapes ", DimVector(a), " and ",
             DimVector(b), " cannot be broadcast together (dimension ", i, ": ", da, " vs ", db,
             ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Tensor Tensor::empty(IntList sizes, ScalarType dtype, Device device) {
  const std::int64_t n = checked_numel(sizes, "empty");
  // The byte count must not wrap either: 2^62 float32 elements are 0 bytes modulo 2^64, an
  // empty block that the first write went through (a segfault from a model size in a config).
  // Half the address space, so that the allocators' rounding up cannot wrap.
  const auto elem = static_cast<std::int64_t>(core::element_size(dtype));
  TB_CHECK(n <= (std::numeric_limits<std::int64_t>::max() / 2) / elem, "[empty] shape ",
           DimVector(sizes), " of ", scalar_type_name(dtype), " needs ", n, " x ", elem,
           " bytes, more than any machine can address");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = make_storage(static_cast<std::size_t>(n * elem), device);
  impl->sizes = DimVector(sizes);
  impl->strides = contiguous_strides(sizes);
  impl->dtype = dtype;
  impl->device = device;
  return Tensor(std::move(impl));
}

std::int64_t Tensor::size(std::int64_t d) const {
  TB_CHECK_T(IndexError, dim() > 0, "[size] a 0-d tensor has no dimension ", d);
  return checked().sizes[static_cast<std::size_t>(wrap_dim(d, dim(), "size"))];
}

std::int64_t Tensor::stride(std::int64_t d) const {
  TB_CHECK_T(IndexError, dim() > 0, "[stride] a 0-d tensor has no dimension ", d);
  return checked().strides[static_cast<std::size_t>(wrap_dim(d, dim(), "stride"))];
}

std::int64_t Tensor::numel() const {
  std::int64_t n = 1;
  for (auto s : checked().sizes)
    n *= s;
  return n;
}

bool Tensor::is_contiguous() const {
  const auto& im = checked();
  std::int64_t expected = 1;
  for (std::size_t i = im.sizes.size(); i-- > 0;) {
    if (im.sizes[i] == 1) continue;
    if (im.sizes[i] == 0) return true;
    if (im.strides[i] != expected) return false;
    expected *= im.sizes[i];
  }
  return true;
}

void* Tensor::data_ptr() const {
  const auto& im = checked();
  auto* base = static_cast<char*>(im.storage->data());
  if (base == nullptr) return nullptr;
  return base + im.offset * static_cast<std::int64_t>(core::element_size(im.dtype));
}

namespace {
std::atomic<ViewHook> view_hook{nullptr};
}  // namespace

void set_view_hook(ViewHook hook) {
  view_hook.store(hook);
}

namespace {

using VK = ViewRecord::Kind;

// A new handle sharing storage, dtype, device and autograd flag, with new geometry; tells the
// autograd layer about it when the base requires grad.
Tensor make_view(const Tensor& base, DimVector sizes, DimVector strides, std::int64_t offset,
                 const ViewRecord& record) {
  auto impl = std::make_shared<TensorImpl>();
  const TensorImpl& b = *base.impl();
  impl->storage = b.storage;
  impl->sizes = std::move(sizes);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = b.dtype;
  impl->device = b.device;
  impl->requires_grad = b.requires_grad;
  Tensor view(std::move(impl));
  if (b.requires_grad) {
    if (ViewHook hook = view_hook.load()) hook(base, view, record);
  }
  return view;
}

ViewRecord reshape_record() {
  return ViewRecord{};
}

// Infers a single -1 entry so the product matches numel.
DimVector infer_size(IntList shape, std::int64_t numel, const char* op) {
  DimVector out(shape);
  std::int64_t known = 1;
  std::optional<std::size_t> infer;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      TB_CHECK(!infer.has_value(), "[", op, "] only one dimension can be inferred (-1), got shape ",
               DimVector(shape));
      infer = i;
    } else {
      TB_CHECK(shape[i] >= 0, "[", op, "] invalid size ", shape[i], " in shape ", DimVector(shape));
      // A product that wraps could equal the input's size (0): checked, not multiplied blindly.
      TB_CHECK(shape[i] == 0 || known <= std::numeric_limits<std::int64_t>::max() / shape[i], "[",
               op, "] shape ", DimVector(shape), " is invalid for input of size ", numel);
      known *= shape[i];
    }
  }
  if (infer) {
    TB_CHECK(known != 0 && numel % known == 0, "[", op, "] shape ", DimVector(shape),
             " is invalid for input of size ", numel);
    out[*infer] = numel / known;
  } else {
    TB_CHECK(known == numel, "[", op, "] shape ", DimVector(shape),
             " is invalid for input of size ", numel);
  }
  return out;
}

// Strides for viewing (old sizes/strides) as new sizes without copying, if possible
// (PyTorch's computeStride): each run of merged old dims must be contiguous in itself.
std::optional<DimVector> view_strides(IntList old_sizes, IntList old_strides, IntList new_sizes) {
  DimVector new_strides(new_sizes.size());
  if (old_sizes.empty()) {
    for (auto& s : new_strides)
      s = 1;
    return new_strides;
  }
  std::int64_t numel = 1;
  for (auto s : old_sizes)
    numel *= s;
  if (numel == 0) {
    if (std::equal(old_sizes.begin(), old_sizes.end(), new_sizes.begin(), new_sizes.end())) {
      return DimVector(old_strides);
    }
    return contiguous_strides(new_sizes);
  }
  std::int64_t view_d = static_cast<std::int64_t>(new_sizes.size()) - 1;
  std::int64_t chunk_base_stride = old_strides.back();
  std::int64_t tensor_numel = 1;
  std::int64_t view_numel = 1;
  for (std::int64_t tensor_d = static_cast<std::int64_t>(old_sizes.size()) - 1; tensor_d >= 0;
       --tensor_d) {
    tensor_numel *= old_sizes[static_cast<std::size_t>(tensor_d)];
    if (tensor_d == 0 ||
        (old_sizes[static_cast<std::size_t>(tensor_d - 1)] != 1 &&
         old_strides[static_cast<std::size_t>(tensor_d - 1)] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 &&
             (view_numel < tensor_numel || new_sizes[static_cast<std::size_t>(view_d)] == 1)) {
        new_strides[static_cast<std::size_t>(view_d)] = view_numel * chunk_base_stride;
        view_numel *= new_sizes[static_cast<std::size_t>(view_d)];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (tensor_d > 0) {
        chunk_base_stride = old_strides[static_cast<std::size_t>(tensor_d - 1)];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return new_strides;
}

}  // namespace

Tensor Tensor::view(IntList sizes) const {
  const DimVector shape = infer_size(sizes, numel(), "view");
  auto st = view_strides(this->sizes(), strides(), shape.span());
  TB_CHECK(st.has_value(), "[view] cannot view a tensor of shape ", DimVector(this->sizes()),
           " and strides ", DimVector(strides()), " as shape ", shape,
           ": the memory is not laid out compatibly; use reshape() (it copies when needed)");
  return make_view(*this, shape, std::move(*st), storage_offset(), reshape_record());
}

Tensor Tensor::reshape(IntList sizes) const {
  const DimVector shape = infer_size(sizes, numel(), "reshape");
  if (auto st = view_strides(this->sizes(), strides(), shape.span())) {
    return make_view(*this, shape, std::move(*st), storage_offset(), reshape_record());
  }
  return contiguous().view(shape.span());
}

Tensor Tensor::transpose(std::int64_t d0, std::int64_t d1) const {
  d0 = wrap_dim(d0, dim(), "transpose");
  d1 = wrap_dim(d1, dim(), "transpose");
  DimVector sz(sizes());
  DimVector st(strides());
  if (dim() > 0) {
    std::swap(sz[static_cast<std::size_t>(d0)], sz[static_cast<std::size_t>(d1)]);
    std::swap(st[static_cast<std::size_t>(d0)], st[static_cast<std::size_t>(d1)]);
  }
  ViewRecord r;
  r.kind = VK::Transpose;
  r.dim0 = d0;
  r.dim1 = d1;
  return make_view(*this, std::move(sz), std::move(st), storage_offset(), r);
}

Tensor Tensor::t() const {
  TB_CHECK(dim() <= 2, "[t] expects a tensor with <= 2 dimensions, got ", dim(),
           "; use transpose(dim0, dim1)");
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::permute(IntList dims) const {
  const auto r = dim();
  TB_CHECK(static_cast<std::int64_t>(dims.size()) == r, "[permute] got ", dims.size(),
           " dimensions for a tensor of rank ", r);
  DimVector sz(static_cast<std::size_t>(r));
  DimVector st(static_cast<std::size_t>(r));
  std::vector<bool> seen(static_cast<std::size_t>(r), false);
  for (std::size_t i = 0; i < dims.size(); ++i) {
    const auto d = static_cast<std::size_t>(wrap_dim(dims[i], r, "permute"));
    TB_CHECK(!seen[d], "[permute] dimension ", dims[i], " repeats in ", DimVector(dims));
    seen[d] = true;
    sz[i] = sizes()[d];
    st[i] = strides()[d];
  }
  ViewRecord rec;
  rec.kind = VK::Permute;
  for (auto d : dims)
    rec.dims.push_back(wrap_dim(d, dim(), "permute"));
  return make_view(*this, std::move(sz), std::move(st), storage_offset(), rec);
}

Tensor Tensor::slice(std::int64_t d, std::int64_t start, std::int64_t end,
                     std::int64_t step) const {
  TB_CHECK(dim() > 0, "[slice] cannot slice a 0-d tensor");
  d = wrap_dim(d, dim(), "slice");
  TB_CHECK(step > 0, "[slice] step must be positive, got ", step);
  const std::int64_t n = sizes()[static_cast<std::size_t>(d)];
  auto clamp = [n](std::int64_t v) {
    if (v < 0) v += n;
    return std::clamp<std::int64_t>(v, 0, n);
  };
  start = clamp(start);
  end = std::max(clamp(end), start);
  DimVector sz(sizes());
  DimVector st(strides());
  sz[static_cast<std::size_t>(d)] = (end - start + step - 1) / step;
  st[static_cast<std::size_t>(d)] *= step;
  ViewRecord r;
  r.kind = VK::Slice;
  r.dim0 = d;
  r.start = start;
  r.end = end;
  r.step = step;
  return make_view(*this, std::move(sz), std::move(st),
                   storage_offset() + start * strides()[static_cast<std::size_t>(d)], r);
}

Tensor Tensor::narrow(std::int64_t d, std::int64_t start, std::int64_t length) const {
  TB_CHECK(dim() > 0, "[narrow] cannot narrow a 0-d tensor");
  d = wrap_dim(d, dim(), "narrow");
  const std::int64_t n = sizes()[static_cast<std::size_t>(d)];
  if (start < 0) start += n;
  TB_CHECK_T(IndexError, start >= 0 && length >= 0 && start + length <= n, "[narrow] start ", start,
             " and length ", length, " out of range for dimension ", d, " of size ", n);
  return slice(d, start, start + length);
}

Tensor Tensor::select(std::int64_t d, std::int64_t index) const {
  TB_CHECK(dim() > 0, "[select] cannot select on a 0-d tensor");
  d = wrap_dim(d, dim(), "select");
  const std::int64_t n = sizes()[static_cast<std::size_t>(d)];
  TB_CHECK_T(IndexError, index >= -n && index < n, "[select] index ", index,
             " out of range for dimension ", d, " of size ", n);
  if (index < 0) index += n;
  DimVector sz(sizes());
  DimVector st(strides());
  const std::int64_t offset = storage_offset() + index * st[static_cast<std::size_t>(d)];
  sz.erase(static_cast<std::size_t>(d));
  st.erase(static_cast<std::size_t>(d));
  ViewRecord r;
  r.kind = VK::Select;
  r.dim0 = d;
  r.start = index;
  return make_view(*this, std::move(sz), std::move(st), offset, r);
}

Tensor Tensor::expand(IntList target) const {
  const auto r = static_cast<std::int64_t>(target.size());
  TB_CHECK(r >= dim(), "[expand] the target shape ", DimVector(target), " has fewer dimensions (",
           r, ") than the tensor (", dim(), ")");
  DimVector sz(static_cast<std::size_t>(r));
  DimVector st(static_cast<std::size_t>(r));
  for (std::int64_t i = r - 1; i >= 0; --i) {
    const std::int64_t j = i - (r - dim());  // matching source dim, < 0 for new leading dims
    const std::int64_t want = target[static_cast<std::size_t>(i)];
    if (j < 0) {
      TB_CHECK(want >= 0, "[expand] size -1 is not allowed for a new leading dimension (", i,
               ") in ", DimVector(target));
      sz[static_cast<std::size_t>(i)] = want;
      st[static_cast<std::size_t>(i)] = 0;
      continue;
    }
    const std::int64_t have = sizes()[static_cast<std::size_t>(j)];
    if (want == -1 || want == have) {
      sz[static_cast<std::size_t>(i)] = have;
      st[static_cast<std::size_t>(i)] = strides()[static_cast<std::size_t>(j)];
    } else {
      TB_CHECK(have == 1, "[expand] the expanded size (", want, ") must match the existing size (",
               have, ") at non-singleton dimension ", i, ": target ", DimVector(target),
               ", tensor ", DimVector(sizes()));
      sz[static_cast<std::size_t>(i)] = want;
      st[static_cast<std::size_t>(i)] = 0;
    }
  }
  ViewRecord rec;
  rec.kind = VK::Expand;
  return make_view(*this, std::move(sz), std::move(st), storage_offset(), rec);
}

Tensor Tensor::squeeze() const {
  DimVector sz;
  DimVector st;
  for (std::int64_t i = 0; i < dim(); ++i) {
    if (sizes()[static_cast<std::size_t>(i)] != 1) {
      sz.push_back(sizes()[static_cast<std::size_t>(i)]);
      st.push_back(strides()[static_cast<std::size_t>(i)]);
    }
  }
  return make_view(*this, std::move(sz), std::move(st), storage_offset(), reshape_record());
}

Tensor Tensor::squeeze(std::int64_t d) const {
  if (dim() == 0) return *this;
  d = wrap_dim(d, dim(), "squeeze");
  if (sizes()[static_cast<std::size_t>(d)] != 1)
    return make_view(*this, DimVector(sizes()), DimVector(strides()), storage_offset(),
                     reshape_record());
  DimVector sz(sizes());
  DimVector st(strides());
  sz.erase(static_cast<std::size_t>(d));
  st.erase(static_cast<std::size_t>(d));
  return make_view(*this, std::move(sz), std::move(st), storage_offset(), reshape_record());
}

Tensor Tensor::unsqueeze(std::int64_t d) const {
  d = wrap_dim(d, dim() + 1, "unsqueeze");
  DimVector sz(sizes());
  DimVector st(strides());
  const auto i = static_cast<std::size_t>(d);
  const std::int64_t stride = i < sz.size() ? sz[i] * st[i] : 1;
  sz.insert(i, 1);
  st.insert(i, stride);
  return make_view(*this, std::move(sz), std::move(st), storage_offset(), reshape_record());
}

Tensor Tensor::flatten(std::int64_t start_dim, std::int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  start_dim = wrap_dim(start_dim, dim(), "flatten");
  end_dim = wrap_dim(end_dim, dim(), "flatten");
  TB_CHECK(start_dim <= end_dim, "[flatten] start_dim (", start_dim,
           ") must not come after end_dim (", end_dim, ")");
  DimVector shape;
  std::int64_t merged = 1;
  for (std::int64_t i = 0; i < dim(); ++i) {
    const auto s = sizes()[static_cast<std::size_t>(i)];
    if (i < start_dim || i > end_dim) {
      shape.push_back(s);
    } else {
      merged *= s;
      if (i == end_dim) shape.push_back(merged);
    }
  }
  return reshape(shape.span());
}

Tensor Tensor::as_strided(IntList sizes, IntList strides,
                          std::optional<std::int64_t> offset) const {
  TB_CHECK(sizes.size() == strides.size(), "[as_strided] sizes ", DimVector(sizes), " and strides ",
           DimVector(strides), " differ in length");
  const std::int64_t off = offset.value_or(storage_offset());
  TB_CHECK(off >= 0, "[as_strided] negative storage offset ", off);
  // The furthest element must lie inside the storage.
  std::int64_t max_index = off;
  bool empty = false;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    TB_CHECK(sizes[i] >= 0 && strides[i] >= 0, "[as_strided] negative size or stride in sizes ",
             DimVector(sizes), " strides ", DimVector(strides));
    if (sizes[i] == 0) empty = true;
    max_index += (sizes[i] - 1) * strides[i];
  }
  const auto capacity =
      static_cast<std::int64_t>(storage()->nbytes() / core::element_size(dtype()));
  TB_CHECK(empty || max_index < capacity, "[as_strided] sizes ", DimVector(sizes), ", strides ",
           DimVector(strides), " and offset ", off, " reach element ", max_index,
           " but the storage holds ", capacity, " elements");
  ViewRecord r;
  r.kind = VK::AsStrided;
  return make_view(*this, DimVector(sizes), DimVector(strides), off, r);
}

template <typename T>
Tensor from_vector(const std::vector<T>& values, IntList sizes) {
  const std::int64_t n = checked_numel(sizes, "from_vector");
  TB_CHECK(n == static_cast<std::int64_t>(values.size()), "[from_vector] ", values.size(),
           " values do not fill shape ", DimVector(sizes), " (", n, " elements)");
  Tensor t = Tensor::empty(sizes, scalar_type_of<T>);
  if constexpr (std::is_same_v<T, bool>) {
    auto* out = t.data_ptr<bool>();
    for (std::int64_t i = 0; i < n; ++i)
      out[i] = values[static_cast<std::size_t>(i)];
  } else if (n > 0) {
    std::memcpy(t.data_ptr(), values.data(), static_cast<std::size_t>(n) * sizeof(T));
  }
  return t;
}

template Tensor from_vector<bool>(const std::vector<bool>&, IntList);
template Tensor from_vector<std::uint8_t>(const std::vector<std::uint8_t>&, IntList);
template Tensor from_vector<std::int8_t>(const std::vector<std::int8_t>&, IntList);
template Tensor from_vector<std::int16_t>(const std::vector<std::int16_t>&, IntList);
template Tensor from_vector<std::int32_t>(const std::vector<std::int32_t>&, IntList);
template Tensor from_vector<std::int64_t>(const std::vector<std::int64_t>&, IntList);
template Tensor from_vector<Half>(const std::vector<Half>&, IntList);
template Tensor from_vector<BFloat16>(const std::vector<BFloat16>&, IntList);
template Tensor from_vector<float>(const std::vector<float>&, IntList);
template Tensor from_vector<double>(const std::vector<double>&, IntList);

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  return os << t.str();
}

}  // namespace tb::core
