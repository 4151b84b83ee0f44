// Tensor metadata and views: shapes, strides, offsets, contiguity, broadcasting rules, the CPU
// allocator, devices, and the error messages for bad shapes and dims.
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "engine/core/allocator.h"
#include "engine/core/error.h"
#include "engine/core/tensor.h"
#include "tests/engine/test_util.h"

namespace {

using tb::core::Device;
using tb::core::DeviceType;
using tb::core::DimVector;
using tb::core::ScalarType;
using tb::core::Tensor;
namespace core = tb::core;

Tensor iota(std::vector<std::int64_t> shape) {
  const auto n = core::checked_numel(shape, "test");
  std::vector<float> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), 0.0f);
  return core::from_vector(v, shape);
}

using tb::test::error_of;

#define EXPECT_ERROR_CONTAINS(stmt, text) \
  EXPECT_NE(error_of([&] { stmt; }).find(text), std::string::npos) << error_of([&] { stmt; })

TEST(Device, ParsesAndPrints) {
  EXPECT_EQ(Device::parse("cpu"), Device());
  EXPECT_EQ(Device::parse("cuda:1"), Device(DeviceType::CUDA, 1));
  EXPECT_EQ(Device::parse("cuda"), Device(DeviceType::CUDA, 0));
  EXPECT_EQ(Device(DeviceType::CUDA, 3).str(), "cuda:3");
  EXPECT_ERROR_CONTAINS(Device::parse("tpu:0"), "cannot parse device 'tpu:0'");
  EXPECT_ERROR_CONTAINS(Device::parse("cuda:x"), "the index after ':' must be an integer");
  EXPECT_ERROR_CONTAINS(Device(DeviceType::CPU, 1), "the CPU device has index 0 only");
}

TEST(Allocator, CpuMemoryIsAlignedAndCounted) {
  auto& a = core::cpu_allocator();
  const auto before = a.stats(Device()).allocated;
  {
    Tensor t = Tensor::empty({3, 5}, ScalarType::Float32);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.data_ptr()) % core::kCpuAlignment, 0u);
    EXPECT_GE(a.stats(Device()).allocated, before + 64);
    EXPECT_GE(a.stats(Device()).peak_allocated, a.stats(Device()).allocated);
  }
  EXPECT_EQ(a.stats(Device()).allocated, before);
  // Every device type of this build has an allocator (PrivateUse1: the openreg backend's).
  EXPECT_EQ(core::get_allocator(DeviceType::PrivateUse1)
                .allocate(16, Device(DeviceType::PrivateUse1, 0))
                .device(),
            Device(DeviceType::PrivateUse1, 0));
}

TEST(Allocator, CpuBlocksAreReusedAndReleasable) {
  auto& a = core::cpu_allocator();
  void* small = nullptr;
  void* large = nullptr;
  {
    Tensor s = Tensor::empty({10}, ScalarType::Float32);       // 40 B -> the 64 B class
    Tensor l = Tensor::empty({1 << 20}, ScalarType::Float32);  // 4 MiB
    small = s.data_ptr();
    large = l.data_ptr();
  }
  EXPECT_GE(a.stats(Device()).reserved, a.stats(Device()).allocated + (4 << 20));
  // The same sizes come back from the caches (same thread for the small one).
  Tensor s2 = Tensor::empty({16}, ScalarType::Float32);
  Tensor l2 = Tensor::empty({1 << 20}, ScalarType::Float32);
  EXPECT_EQ(s2.data_ptr(), small);
  EXPECT_EQ(l2.data_ptr(), large);
  l2 = Tensor();
  a.empty_cache();
  EXPECT_LT(a.stats(Device()).reserved - a.stats(Device()).allocated, 4 << 20);
}

TEST(TensorMeta, EmptyHasContiguousStrides) {
  Tensor t = Tensor::empty({2, 3, 4}, ScalarType::Float64);
  EXPECT_EQ(t.dim(), 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(DimVector(t.strides()), (DimVector{12, 4, 1}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.nbytes(), 24u * 8u);
  Tensor s = Tensor::empty({}, ScalarType::Int32);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.numel(), 1);
  EXPECT_ERROR_CONTAINS(Tensor::empty({2, -1}), "[empty] negative size -1 at dimension 1");
  // 2^62 float32 elements fit an int64 count but their 2^64 bytes wrap to 0: refused, not an
  // empty block that the first write goes through.
  const std::int64_t big = std::int64_t{1} << 31;
  EXPECT_ERROR_CONTAINS(Tensor::empty({big, big}),
                        "[empty] shape [2147483648, 2147483648] of "
                        "float32 needs");
  EXPECT_ERROR_CONTAINS(Tensor::empty({big, big}, ScalarType::Int8), "more than any machine");
}

TEST(TensorMeta, DataPtrChecksDtype) {
  Tensor t = Tensor::empty({2}, ScalarType::Float32);
  EXPECT_NO_THROW(t.data_ptr<float>());
  EXPECT_ERROR_CONTAINS(t.data_ptr<double>(), "data_ptr<float64> called on a float32 tensor");
}

TEST(Views, TransposeAndPermuteShareStorage) {
  Tensor t = iota({2, 3, 4});
  Tensor tt = t.transpose(0, 2);
  EXPECT_EQ(DimVector(tt.sizes()), (DimVector{4, 3, 2}));
  EXPECT_EQ(DimVector(tt.strides()), (DimVector{1, 4, 12}));
  EXPECT_FALSE(tt.is_contiguous());
  EXPECT_EQ(tt.storage().get(), t.storage().get());
  Tensor p = t.permute({1, 2, 0});
  EXPECT_EQ(DimVector(p.sizes()), (DimVector{3, 4, 2}));
  EXPECT_EQ(DimVector(p.strides()), (DimVector{4, 1, 12}));
  EXPECT_ERROR_CONTAINS(t.permute({0, 0, 1}), "[permute] dimension 0 repeats");
  EXPECT_ERROR_CONTAINS(t.permute({0, 1}), "[permute] got 2 dimensions for a tensor of rank 3");
  EXPECT_ERROR_CONTAINS(t.transpose(0, 3),
                        "[transpose] dimension 3 out of range for a tensor of rank 3");
  EXPECT_ERROR_CONTAINS(t.t(), "[t] expects a tensor with <= 2 dimensions");
}

TEST(Views, SliceSelectNarrowComputeOffsets) {
  Tensor t = iota({4, 6});
  Tensor s = t.slice(1, 1, 6, 2);  // columns 1, 3, 5
  EXPECT_EQ(DimVector(s.sizes()), (DimVector{4, 3}));
  EXPECT_EQ(DimVector(s.strides()), (DimVector{6, 2}));
  EXPECT_EQ(s.storage_offset(), 1);
  EXPECT_EQ(t.slice(0, -2, 100).size(0), 2);  // clamped like Python
  EXPECT_EQ(t.slice(0, 3, 1).size(0), 0);     // empty, not negative
  Tensor r = t.select(0, -1);                 // last row
  EXPECT_EQ(r.dim(), 1);
  EXPECT_EQ(r.storage_offset(), 18);
  EXPECT_EQ(t.narrow(1, 2, 3).storage_offset(), 2);
  EXPECT_ERROR_CONTAINS(t.slice(1, 0, 4, 0), "[slice] step must be positive, got 0");
  EXPECT_ERROR_CONTAINS(t.select(0, 4), "[select] index 4 out of range for dimension 0 of size 4");
  EXPECT_ERROR_CONTAINS(t.narrow(1, 4, 3), "[narrow] start 4 and length 3 out of range");
}

TEST(Views, ViewNeedsCompatibleStrides) {
  Tensor t = iota({2, 3, 4});
  EXPECT_EQ(DimVector(t.view({6, 4}).sizes()), (DimVector{6, 4}));
  EXPECT_EQ(DimVector(t.view({-1, 2}).sizes()), (DimVector{12, 2}));
  EXPECT_EQ(DimVector(t.view({4, -1}).sizes()), (DimVector{4, 6}));
  // A transposed tensor can still be viewed when the merged dims stay contiguous.
  Tensor tt = t.transpose(1, 2);  // [2, 4, 3], strides [12, 1, 4]
  EXPECT_ERROR_CONTAINS(tt.view({2, 12}), "use reshape()");
  EXPECT_EQ(DimVector(tt.view({2, 4, 3, 1}).sizes()), (DimVector{2, 4, 3, 1}));
  EXPECT_ERROR_CONTAINS(t.view({5, 5}), "shape [5, 5] is invalid for input of size 24");
  // A product of sizes that wraps is not taken for the input's size.
  const Tensor none = Tensor::empty({0});
  EXPECT_ERROR_CONTAINS(none.view({std::int64_t{1} << 32, std::int64_t{1} << 32, 4}),
                        "is invalid for input of size 0");
  EXPECT_ERROR_CONTAINS(t.view({-1, -1}), "only one dimension can be inferred");
}

TEST(Views, ExpandBroadcastsWithZeroStrides) {
  Tensor t = iota({3, 1});
  Tensor e = t.expand({2, 3, 4});
  EXPECT_EQ(DimVector(e.sizes()), (DimVector{2, 3, 4}));
  EXPECT_EQ(DimVector(e.strides()), (DimVector{0, 1, 0}));
  EXPECT_EQ(DimVector(t.expand({-1, 5}).sizes()), (DimVector{3, 5}));
  EXPECT_ERROR_CONTAINS(
      t.expand({4, 4}),
      "the expanded size (4) must match the existing size (3) at non-singleton dimension 0");
  EXPECT_ERROR_CONTAINS(t.expand({4}), "has fewer dimensions");
}

TEST(Views, SqueezeUnsqueezeFlatten) {
  Tensor t = iota({2, 1, 3, 1});
  EXPECT_EQ(DimVector(t.squeeze().sizes()), (DimVector{2, 3}));
  EXPECT_EQ(DimVector(t.squeeze(1).sizes()), (DimVector{2, 3, 1}));
  EXPECT_EQ(DimVector(t.squeeze(0).sizes()), (DimVector{2, 1, 3, 1}));  // size 2: unchanged
  Tensor u = iota({2, 3}).unsqueeze(-1);
  EXPECT_EQ(DimVector(u.sizes()), (DimVector{2, 3, 1}));
  EXPECT_EQ(DimVector(u.strides()), (DimVector{3, 1, 1}));
  EXPECT_EQ(DimVector(iota({2, 3}).unsqueeze(0).sizes()), (DimVector{1, 2, 3}));
  EXPECT_EQ(DimVector(iota({2, 3, 4}).flatten(1).sizes()), (DimVector{2, 12}));
  EXPECT_EQ(DimVector(iota({2, 3, 4}).flatten().sizes()), (DimVector{24}));
}

TEST(Views, AsStridedIsBoundsChecked) {
  Tensor t = iota({10});
  Tensor w = t.as_strided({4, 3}, {2, 1}, 1);  // sliding windows
  EXPECT_EQ(w.storage_offset(), 1);
  EXPECT_ERROR_CONTAINS(t.as_strided({4, 4}, {3, 1}),
                        "reach element 12 but the storage holds 10 elements");
  EXPECT_ERROR_CONTAINS(t.as_strided({2}, {1, 1}), "differ in length");
}

TEST(Broadcast, ShapesFollowNumPyRules) {
  EXPECT_EQ(core::broadcast_shapes({3, 1}, {1, 4}, "t"), (DimVector{3, 4}));
  EXPECT_EQ(core::broadcast_shapes({5, 1, 2}, {3, 1}, "t"), (DimVector{5, 3, 2}));
  EXPECT_EQ(core::broadcast_shapes({}, {2, 2}, "t"), (DimVector{2, 2}));
  EXPECT_EQ(core::broadcast_shapes({0}, {1}, "t"), (DimVector{0}));
  EXPECT_ERROR_CONTAINS(
      core::broadcast_shapes({2, 3}, {4}, "add"),
      "[add] shapes [2, 3] and [4] cannot be broadcast together (dimension 1: 3 vs 4)");
}

TEST(FromVector, ChecksCountAndKeepsValues) {
  Tensor t = core::from_vector(std::vector<std::int64_t>{1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(t.dtype(), ScalarType::Int64);
  EXPECT_EQ(t.data_ptr<std::int64_t>()[5], 6);
  EXPECT_ERROR_CONTAINS(core::from_vector(std::vector<float>{1, 2, 3}, {2, 2}),
                        "3 values do not fill shape [2, 2]");
}

TEST(WrapDim, NegativeAndZeroDim) {
  EXPECT_EQ(core::wrap_dim(-1, 3, "x"), 2);
  EXPECT_EQ(core::wrap_dim(0, 0, "x"), 0);  // 0-d tensors accept 0 and -1
  EXPECT_EQ(core::wrap_dim(-1, 0, "x"), 0);
  EXPECT_THROW(core::wrap_dim(3, 3, "x"), tb::IndexError);
}

}  // namespace
