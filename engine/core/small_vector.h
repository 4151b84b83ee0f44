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
  constexpr IntList() = default;
  constexpr IntList(const std::int64_t* data, std::size_t size) : data_(data), size_(size) {}
  IntList(std::initializer_list<std::int64_t> il)  // NOLINT(google-explicit-constructor)
      : data_(il.begin()), size_(il.size()) {}
  IntList(const std::vector<std::int64_t>& v)  // NOLINT(google-explicit-constructor)
      : data_(v.data()), size_(v.size()) {}
  constexpr IntList(std::span<const std::int64_t> s)  // NOLINT(google-explicit-constructor)
      : data_(s.data()), size_(s.size()) {}

  constexpr const std::int64_t* data() const noexcept { return data_; }
  constexpr std::size_t size() const noexcept { return size_; }
  constexpr bool empty() const noexcept { return size_ == 0; }
  constexpr const std::int64_t* begin() const noexcept { return data_; }
  constexpr const std::int64_t* end() const noexcept { return data_ + size_; }
  constexpr const std::int64_t& operator[](std::size_t i) const noexcept { return data_[i]; }
  constexpr const std::int64_t& back() const noexcept { return data_[size_ - 1]; }
  constexpr IntList subspan(std::size_t offset, std::size_t count) const noexcept {
    return {data_ + offset, count};
  }
  std::vector<std::int64_t> vec() const { return {begin(), end()}; }

 private:
  const std::int64_t* data_ = nullptr;
  std::size_t size_ = 0;
};

class DimVector {
 public:
  static constexpr std::size_t kInline = 6;

  DimVector() = default;
  explicit DimVector(std::size_t n, std::int64_t value = 0) { resize(n, value); }
  DimVector(std::initializer_list<std::int64_t> il) { assign(il.begin(), il.size()); }
  DimVector(std::span<const std::int64_t> s) { assign(s.data(), s.size()); }     // NOLINT
  DimVector(IntList s) { assign(s.data(), s.size()); }                           // NOLINT
  DimVector(const std::vector<std::int64_t>& v) { assign(v.data(), v.size()); }  // NOLINT
  DimVector(const DimVector& o) { assign(o.data(), o.size()); }
  DimVector& operator=(const DimVector& o) {
    if (this != &o) assign(o.data(), o.size());
    return *this;
  }
  DimVector(DimVector&& o) noexcept { *this = std::move(o); }
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

  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  std::int64_t* data() noexcept { return heap_ ? heap_.get() : inline_; }
  const std::int64_t* data() const noexcept { return heap_ ? heap_.get() : inline_; }
  std::int64_t& operator[](std::size_t i) noexcept { return data()[i]; }
  const std::int64_t& operator[](std::size_t i) const noexcept { return data()[i]; }
  std::int64_t* begin() noexcept { return data(); }
  std::int64_t* end() noexcept { return data() + size_; }
  const std::int64_t* begin() const noexcept { return data(); }
  const std::int64_t* end() const noexcept { return data() + size_; }
  std::int64_t& back() noexcept { return data()[size_ - 1]; }

  void resize(std::size_t n, std::int64_t value = 0) {
    reserve(n);
    for (std::size_t i = size_; i < n; ++i)
      data()[i] = value;
    size_ = n;
  }
  void push_back(std::int64_t v) {
    reserve(size_ + 1);
    data()[size_++] = v;
  }
  void insert(std::size_t pos, std::int64_t v) {
    reserve(size_ + 1);
    std::int64_t* d = data();
    std::memmove(d + pos + 1, d + pos, (size_ - pos) * sizeof(std::int64_t));
    d[pos] = v;
    ++size_;
  }
  void erase(std::size_t pos) {
    std::int64_t* d = data();
    std::memmove(d + pos, d + pos + 1, (size_ - pos - 1) * sizeof(std::int64_t));
    --size_;
  }
  void clear() noexcept { size_ = 0; }

  IntList span() const noexcept { return {data(), size_}; }
  operator IntList() const noexcept { return span(); }  // NOLINT(google-explicit-constructor)
  std::vector<std::int64_t> vec() const { return {begin(), end()}; }

  friend bool operator==(const DimVector& a, const DimVector& b) noexcept {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }
  friend bool operator!=(const DimVector& a, const DimVector& b) noexcept { return !(a == b); }

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
    std::memcpy(data(), src, n * sizeof(std::int64_t));
    size_ = n;
  }

  std::int64_t inline_[kInline] = {};
  std::unique_ptr<std::int64_t[]> heap_;
  std::size_t size_ = 0;
  std::size_t capacity_ = kInline;
};

}  // namespace tb::core
