// DimVector: a vector of int64 with inline room for 6 dimensions, so shapes and strides of
// ordinary tensors never touch the heap (allocation is most of the cost of a tiny op).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <span>
#include <vector>

namespace tb::core {

/// A non-owning view of int64 values (sizes, strides, dims), constructible from a braced list,
/// a std::vector, a DimVector or a span. Like std::span it must not outlive what it views; a
/// braced list lives until the end of the full expression, so pass it straight to a call.
class IntList {
 public:
  /// An empty list.
  constexpr IntList() = default;
  /// Views `size` values starting at `data` (not copied; must outlive the IntList).
  constexpr IntList(const std::int64_t* data, std::size_t size) : data_(data), size_(size) {}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
// Viewing a braced list is the point (as with PyTorch's IntArrayRef); see the class comment.
#pragma GCC diagnostic ignored "-Winit-list-lifetime"
#endif
  /// Views a braced list; valid only until the end of the full expression that created it.
  IntList(std::initializer_list<std::int64_t> il)  // NOLINT(google-explicit-constructor)
      : data_(il.begin()), size_(il.size()) {}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
  /// Views the vector's elements; invalidated when `v` is destroyed or reallocates.
  IntList(const std::vector<std::int64_t>& v)  // NOLINT(google-explicit-constructor)
      : data_(v.data()), size_(v.size()) {}
  /// Views the span's elements.
  constexpr IntList(std::span<const std::int64_t> s)  // NOLINT(google-explicit-constructor)
      : data_(s.data()), size_(s.size()) {}

  /// Pointer to the first value (may be null when empty).
  constexpr const std::int64_t* data() const noexcept {
    return data_;
  }
  /// Number of values.
  constexpr std::size_t size() const noexcept {
    return size_;
  }
  /// True when size() is 0.
  constexpr bool empty() const noexcept {
    return size_ == 0;
  }
  /// Iterator to the first value.
  constexpr const std::int64_t* begin() const noexcept {
    return data_;
  }
  /// Iterator one past the last value.
  constexpr const std::int64_t* end() const noexcept {
    return data_ + size_;
  }
  /// Value `i`; unchecked (precondition: i < size()).
  constexpr const std::int64_t& operator[](std::size_t i) const noexcept {
    return data_[i];
  }
  /// Last value; unchecked (precondition: !empty()).
  constexpr const std::int64_t& back() const noexcept {
    return data_[size_ - 1];
  }
  /// The `count` values from `offset` on, viewing the same memory; unchecked (precondition:
  /// offset + count <= size()).
  constexpr IntList subspan(std::size_t offset, std::size_t count) const noexcept {
    return {data_ + offset, count};
  }
  /// An owning copy of the values.
  std::vector<std::int64_t> vec() const {
    return {begin(), end()};
  }

 private:
  const std::int64_t* data_ = nullptr;
  std::size_t size_ = 0;
};

/// An owning vector of int64 (shapes, strides) that stores up to kInline values in place and
/// moves to the heap beyond that. Element access is unchecked. Growing past the capacity
/// reallocates (may throw std::bad_alloc) and invalidates pointers, iterators and IntLists.
class DimVector {
 public:
  /// Number of values held without a heap allocation.
  static constexpr std::size_t kInline = 6;

  /// An empty vector.
  DimVector() = default;
  /// `n` copies of `value`.
  explicit DimVector(std::size_t n, std::int64_t value = 0) { resize(n, value); }
  /// A copy of the braced list.
  DimVector(std::initializer_list<std::int64_t> il) { assign(il.begin(), il.size()); }
  /// A copy of the span's values.
  DimVector(std::span<const std::int64_t> s) { assign(s.data(), s.size()); }  // NOLINT
  /// A copy of the viewed values.
  DimVector(IntList s) { assign(s.data(), s.size()); }  // NOLINT
  /// A copy of the vector's values.
  DimVector(const std::vector<std::int64_t>& v) { assign(v.data(), v.size()); }  // NOLINT
  /// A copy of `o`.
  DimVector(const DimVector& o) { assign(o.data(), o.size()); }
  /// Replaces the contents with a copy of `o`.
  DimVector& operator=(const DimVector& o) {
    if (this != &o) assign(o.data(), o.size());
    return *this;
  }
  /// Takes `o`'s heap buffer if it has one, else copies its inline values; `o` is left empty
  /// only in the heap case.
  DimVector(DimVector&& o) noexcept { *this = std::move(o); }
  /// Same as the move constructor, replacing the current contents.
  DimVector& operator=(DimVector&& o) noexcept {
    if (this == &o) return *this;
    if (o.heap_) {
      heap_ = std::move(o.heap_);
      capacity_ = o.capacity_;
      size_ = o.size_;
      o.capacity_ = kInline;
      o.size_ = 0;
    } else {
      heap_.reset();
      capacity_ = kInline;
      assign(o.data(), o.size());
    }
    return *this;
  }

  /// Number of values.
  std::size_t size() const noexcept { return size_; }
  /// True when size() is 0.
  bool empty() const noexcept { return size_ == 0; }
  /// Pointer to the first value (inline or heap storage).
  std::int64_t* data() noexcept { return heap_ ? heap_.get() : inline_; }
  /// Pointer to the first value (inline or heap storage).
  const std::int64_t* data() const noexcept { return heap_ ? heap_.get() : inline_; }
  /// Value `i`; unchecked (precondition: i < size()).
  std::int64_t& operator[](std::size_t i) noexcept { return data()[i]; }
  /// Value `i`; unchecked (precondition: i < size()).
  const std::int64_t& operator[](std::size_t i) const noexcept { return data()[i]; }
  /// Iterator to the first value.
  std::int64_t* begin() noexcept { return data(); }
  /// Iterator one past the last value.
  std::int64_t* end() noexcept { return data() + size_; }
  /// Iterator to the first value.
  const std::int64_t* begin() const noexcept { return data(); }
  /// Iterator one past the last value.
  const std::int64_t* end() const noexcept { return data() + size_; }
  /// Last value; unchecked (precondition: !empty()).
  std::int64_t& back() noexcept { return data()[size_ - 1]; }

  /// Sets the size to `n`; new values are `value`, extra ones are dropped.
  void resize(std::size_t n, std::int64_t value = 0) {
    reserve(n);
    for (std::size_t i = size_; i < n; ++i)
      data()[i] = value;
    size_ = n;
  }
  /// Appends `v`.
  void push_back(std::int64_t v) {
    reserve(size_ + 1);
    data()[size_++] = v;
  }
  /// Inserts `v` before index `pos`; unchecked (precondition: pos <= size()).
  void insert(std::size_t pos, std::int64_t v) {
    reserve(size_ + 1);
    std::int64_t* d = data();
    std::memmove(d + pos + 1, d + pos, (size_ - pos) * sizeof(std::int64_t));
    d[pos] = v;
    ++size_;
  }
  /// Removes the value at `pos`; unchecked (precondition: pos < size()).
  void erase(std::size_t pos) {
    std::int64_t* d = data();
    std::memmove(d + pos, d + pos + 1, (size_ - pos - 1) * sizeof(std::int64_t));
    --size_;
  }
  /// Sets the size to 0 (keeps any heap buffer).
  void clear() noexcept { size_ = 0; }

  /// A view of the current values (not updated by later changes); dangles once the storage it
  /// points at is reallocated or destroyed.
  IntList span() const noexcept { return {data(), size_}; }
  /// Same as span().
  operator IntList() const noexcept { return span(); }  // NOLINT(google-explicit-constructor)
  /// An owning std::vector copy of the values.
  std::vector<std::int64_t> vec() const { return {begin(), end()}; }

  /// Same size and same values.
  friend bool operator==(const DimVector& a, const DimVector& b) noexcept {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }
  /// Different size or values.
  friend bool operator!=(const DimVector& a, const DimVector& b) noexcept { return !(a == b); }

  /// Writes the values as "[2, 3, 4]".
  friend std::ostream& operator<<(std::ostream& os, const DimVector& v) {
    os << '[';
    for (std::size_t i = 0; i < v.size(); ++i)
      os << (i ? ", " : "") << v[i];
    return os << ']';
  }

 private:
  void reserve(std::size_t n) {
    if (n <= capacity_) return;
    const std::size_t cap = std::max(n, capacity_ * 2);
    auto fresh = std::make_unique<std::int64_t[]>(cap);
    std::memcpy(fresh.get(), data(), size_ * sizeof(std::int64_t));
    heap_ = std::move(fresh);
    capacity_ = cap;
  }
  void assign(const std::int64_t* src, std::size_t n) {
    size_ = 0;
    reserve(n);
    if (n > 0) std::memcpy(data(), src, n * sizeof(std::int64_t));
    size_ = n;
  }

  std::int64_t inline_[kInline] = {};
  std::unique_ptr<std::int64_t[]> heap_;
  std::size_t size_ = 0;
  std::size_t capacity_ = kInline;
};

}  // namespace tb::core
