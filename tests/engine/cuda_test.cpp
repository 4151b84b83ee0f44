// CUDA backend tests (label "cuda"). Without a GPU (or without a driver) every test is skipped
// with the reason the engine reports; on a GPU machine they compare against the CPU kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/api/engine_api.h"
#include "engine/backends/cuda/cuda_status.h"
#include "engine/core/allocator.h"
#include "engine/core/error.h"
#include "engine/ops/ops.h"
#include "engine/rng/generator.h"

namespace {

using tb::core::Device;
using tb::core::DeviceType;
using tb::core::ScalarType;
using tb::core::Tensor;
namespace ops = tb::ops;

const Device kGpu(DeviceType::CUDA, 0);

#define REQUIRE_GPU()                                                         \
  do {                                                                        \
    const auto st = tb::backends::cuda_status();                              \
    if (st.device_count == 0) GTEST_SKIP() << "no usable GPU: " << st.reason; \
  } while (false)

TEST(Cuda, StatusExplainsItself) {
  const auto st = tb::backends::cuda_status();
  EXPECT_TRUE(st.compiled);
  if (st.device_count == 0) {
    EXPECT_FALSE(st.reason.empty());
    // A config naming cuda fails with that reason, and nothing crashes.
    try {
      Tensor::empty({4}, ScalarType::Float32, kGpu);
      FAIL() << "allocation on cuda:0 succeeded without a device";
    } catch (const tb::Error& e) {
      EXPECT_NE(std::string(e.what()).find(st.reason), std::string::npos) << e.what();
    }
    GTEST_SKIP() << "no usable GPU: " << st.reason;
  }
  EXPECT_TRUE(st.reason.empty());
  bool listed = false;
  for (const auto& d : tb::api::list_devices())
    listed |= d.name == "cuda:0" && d.available;
  EXPECT_TRUE(listed);
}

TEST(Cuda, RoundTripAndFill) {
  REQUIRE_GPU();
  const std::vector<float> v = {1.0f, -2.5f, 3.25f, 1e-3f, 65504.0f};
  const Tensor h = tb::core::from_vector(v);
  const Tensor g = h.to(kGpu);
  EXPECT_EQ(g.device(), kGpu);
  EXPECT_EQ(g.to_vector<float>(), v);
  // Conversion on the way in and out.
  EXPECT_EQ(h.to(kGpu, ScalarType::Float64).to_vector<double>()[2], 3.25);
  Tensor z = ops::full({1000}, 7.5, ScalarType::BFloat16, kGpu);
  for (float x : z.to_vector<float>())
    ASSERT_EQ(x, 7.5f);
  Tensor i = ops::full({33}, -3, ScalarType::Int64, kGpu);
  EXPECT_EQ(i.to_vector<std::int64_t>()[32], -3);
}

TEST(Cuda, AddMatchesCpu) {
  REQUIRE_GPU();
  auto gen = tb::rng::make_generator(Device());
  gen->manual_seed(3);
  const Tensor a = ops::randn({1 << 20}, gen.get());
  const Tensor b = ops::randn({1 << 20}, gen.get());
  const auto cpu = ops::add(a, b, 0.5).to_vector<float>();
  const auto gpu = ops::add(a.to(kGpu), b.to(kGpu), 0.5).to_vector<float>();
  ASSERT_EQ(cpu.size(), gpu.size());
  for (std::size_t k = 0; k < cpu.size(); ++k)
    ASSERT_NEAR(cpu[k], gpu[k], 1e-6f) << k;
}

// Broadcasting, strided operands and 16-bit dtypes through the shared elementwise kernels (the
// parity test covers every op; this is the quick smoke check).
TEST(Cuda, ElementwiseBroadcastsAndStrides) {
  REQUIRE_GPU();
  auto gen = tb::rng::make_generator(Device());
  gen->manual_seed(5);
  const Tensor a = ops::randn({64, 1}, gen.get());
  const Tensor b = ops::randn({1, 48}, gen.get());
  const auto cpu = ops::mul(ops::tanh(a), b).to_vector<float>();
  const auto gpu = ops::mul(ops::tanh(a.to(kGpu)), b.to(kGpu)).to_vector<float>();
  ASSERT_EQ(cpu.size(), gpu.size());
  for (std::size_t k = 0; k < cpu.size(); ++k)
    ASSERT_NEAR(cpu[k], gpu[k], 1e-6f) << k;
  const Tensor t = ops::randn({8, 5}, gen.get()).t();
  EXPECT_EQ(ops::relu(t.to(kGpu)).to_vector<float>(), ops::relu(t).to_vector<float>());
  const Tensor h = ops::randn({100}, gen.get(), ScalarType::BFloat16);
  const auto hc = ops::exp(h).to_vector<float>();
  const auto hg = ops::exp(h.to(kGpu)).to_vector<float>();
  for (std::size_t k = 0; k < hc.size(); ++k)
    ASSERT_NEAR(hc[k], hg[k], 1e-2f * std::abs(hc[k])) << k;
}

TEST(Cuda, MatmulMatchesCpu) {
  REQUIRE_GPU();
  auto gen = tb::rng::make_generator(Device());
  gen->manual_seed(4);
  for (ScalarType dt : {ScalarType::Float32, ScalarType::Float64}) {
    const Tensor a = ops::randn({129, 257}, gen.get(), dt);
    const Tensor b = ops::randn({257, 65}, gen.get(), dt);
    const auto cpu = ops::mm(a, b).to_vector<double>();
    const auto gpu = ops::mm(a.to(kGpu), b.to(kGpu)).to_vector<double>();
    const double tol = dt == ScalarType::Float32 ? 1e-3 : 1e-10;
    for (std::size_t k = 0; k < cpu.size(); ++k)
      ASSERT_NEAR(cpu[k], gpu[k], tol) << k;
  }
}

TEST(Cuda, MissingKernelNamesTheOp) {
  REQUIRE_GPU();
  const Tensor g = ops::ones({4}).to(kGpu);
  try {
    ops::softmax(g, 0);  // no CUDA kernel yet (and CUDA has no CPU fallback)
    FAIL();
  } catch (const tb::NotImplementedError& e) {
    EXPECT_NE(std::string(e.what()).find("op 'softmax' has no kernel for device cuda:0"),
              std::string::npos)
        << e.what();
  }
}

TEST(Cuda, AllocatorStatistics) {
  REQUIRE_GPU();
  auto& alloc = tb::core::get_allocator(DeviceType::CUDA);
  const auto before = alloc.stats(kGpu).allocated;
  {
    const Tensor t = Tensor::empty({1 << 20}, ScalarType::Float32, kGpu);
    EXPECT_EQ(alloc.stats(kGpu).allocated, before + (4 << 20));
    EXPECT_GE(alloc.stats(kGpu).peak_allocated, before + (4 << 20));
  }
  EXPECT_EQ(alloc.stats(kGpu).allocated, before);
  // The caching allocator keeps the segment and reuses it; empty_cache gives it back.
  const auto reserved = alloc.stats(kGpu).reserved;
  EXPECT_GE(reserved, 4 << 20);
  {
    const Tensor again = Tensor::empty({1 << 20}, ScalarType::Float32, kGpu);
    EXPECT_EQ(alloc.stats(kGpu).reserved, reserved);
  }
  alloc.empty_cache();
  EXPECT_LT(alloc.stats(kGpu).reserved, reserved);
}

TEST(Cuda, PhiloxGeneratorPerDevice) {
  REQUIRE_GPU();
  auto& g = tb::rng::default_generator(kGpu);
  EXPECT_EQ(g.device(), kGpu);
  g.manual_seed(123);
  EXPECT_EQ(g.initial_seed(), 123u);
  EXPECT_EQ(g.get_offset(), 0u);
  g.set_offset(8);
  EXPECT_EQ(g.get_offset(), 8u);
  EXPECT_THROW(g.set_offset(6), tb::Error);
}

}  // namespace
