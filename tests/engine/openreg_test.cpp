// The openreg reference accelerator: memory protection, allocator statistics, cross-device copies,
// per-device Philox generators, streams and events, the CPU fallback (global, per op, deny-list),
// wrapping a kernel through a safe handle, autograd on the device, and a training run compared
// with the CPU's.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <thread>
#include <vector>

#include "engine/amp/grad_scaler.h"
#include "engine/api/engine_api.h"
#include "engine/autograd/autograd.h"
#include "engine/backends/openreg/backend.h"
#include "engine/backends/openreg/runtime.h"
#include "engine/core/allocator.h"
#include "engine/dispatch/dispatcher.h"
#include "engine/dispatch/op_signatures.h"
#include "engine/ops/ops.h"
#include "engine/optim/muon.h"
#include "engine/rng/cpu_generator.h"
#include "engine/rng/generator.h"
#include "engine/rng/philox.h"
#include "engine/train/trainer.h"
#include "tests/engine/test_util.h"

namespace {

using tb::core::Device;
using tb::core::DeviceType;
using tb::core::ScalarType;
using tb::core::Tensor;
using testing::HasSubstr;
namespace ops = tb::ops;
namespace openreg = tb::openreg;
using tb::test::error_of;

Device dev(int i) {
  tb::core::load_backends();
  return Device(DeviceType::PrivateUse1, static_cast<tb::core::DeviceIndex>(i));
}

Tensor host_randn(std::vector<std::int64_t> shape, std::uint64_t seed) {
  tb::rng::CpuGenerator g(seed);
  return ops::randn(tb::core::IntList(shape), &g);
}

TEST(Openreg, NamesItselfAndListsItsDevices) {
  const Device d = Device::parse("openreg:1");
  EXPECT_EQ(d.type(), DeviceType::PrivateUse1);
  EXPECT_EQ(d.str(), "openreg:1");
  EXPECT_EQ(openreg::device_count(), 2);
  EXPECT_EQ(tb::core::device_unavailable_reason(dev(0)), "");
  EXPECT_THAT(tb::core::device_unavailable_reason(dev(7)), HasSubstr("no device openreg:7"));
  // The current device is per thread; a guard switches and restores it.
  EXPECT_EQ(openreg::current_device(), 0);
  {
    openreg::DeviceGuard g(1);
    EXPECT_EQ(openreg::current_device(), 1);
    std::thread([] { EXPECT_EQ(openreg::current_device(), 0); }).join();
  }
  EXPECT_EQ(openreg::current_device(), 0);
  EXPECT_THAT(error_of([] { openreg::set_device(2); }), HasSubstr("no device openreg:2"));
  int listed = 0;
  for (const auto& info : tb::api::list_devices())
    listed += info.name.rfind("openreg:", 0) == 0 && info.available ? 1 : 0;
  EXPECT_EQ(listed, 2);
}

TEST(Openreg, HostAccessToDeviceMemoryIsCaught) {
  ASSERT_TRUE(openreg::memory_protection_enabled());
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const Tensor t = ops::ones({16}, ScalarType::Float32, dev(0));
  openreg::synchronize_device(0);  // the fill has run: the device is idle, its memory closed
  // Reading device memory from host code (instead of copying to the CPU) kills the process with
  // a message naming the device.
  EXPECT_DEATH(
      {
        volatile float v = *static_cast<const float*>(t.data_ptr());
        (void)v;
      },
      "host code accessed device memory of openreg:0");
  // Copies and item() go through the device's kernels and work.
  EXPECT_EQ(ops::sum(t).item(), 16.0);
  EXPECT_EQ(openreg::device_of_pointer(t.data_ptr()), 0);
  const Tensor h = ops::ones({4});
  EXPECT_EQ(openreg::device_of_pointer(h.data_ptr()), -1);
}

TEST(Openreg, AllocatorStatisticsReuseAndEmptyCache) {
  auto& alloc = tb::core::get_allocator(DeviceType::PrivateUse1);
  const Device d1 = dev(1);
  alloc.empty_cache();
  const auto before = alloc.stats(d1);
  void* first = nullptr;
  {
    const Tensor a = Tensor::empty({250}, ScalarType::Float32, d1);  // 1000 bytes -> 1024
    first = a.data_ptr();
    const auto s = alloc.stats(d1);
    EXPECT_EQ(s.allocated - before.allocated, 1024);
    EXPECT_EQ(s.num_allocs - before.num_allocs, 1);
    EXPECT_GE(s.reserved, s.allocated);
    EXPECT_EQ(s.reserved % (2 << 20), 0);
    {
      const Tensor big = Tensor::empty({3 << 20}, ScalarType::Float32, d1);  // 12 MiB
      const auto s2 = alloc.stats(d1);
      EXPECT_EQ(s2.allocated - s.allocated, 12 << 20);
      EXPECT_GE(s2.reserved - s.reserved, 12 << 20);
      EXPECT_GE(s2.peak_allocated, s2.allocated);
    }
    const auto s3 = alloc.stats(d1);
    EXPECT_EQ(s3.allocated, s.allocated);             // freed
    EXPECT_GE(s3.reserved, s.reserved + (12 << 20));  // but cached
    EXPECT_GE(s3.peak_allocated, s.allocated + (12 << 20));
    alloc.reset_peak(d1);
    EXPECT_EQ(alloc.stats(d1).peak_allocated, s3.allocated);
    alloc.empty_cache();
    EXPECT_LE(alloc.stats(d1).reserved, s.reserved);  // the cached top was given back
  }
  // A freed block is reused for the next allocation that fits.
  const Tensor again = Tensor::empty({250}, ScalarType::Float32, d1);
  EXPECT_EQ(again.data_ptr(), first);
  // Out of memory names the device and the figures.
  EXPECT_THAT(error_of([&] { Tensor::empty({std::int64_t{1} << 40}, ScalarType::Float32, d1); }),
              HasSubstr("out of memory on openreg:1"));
  // Each device keeps its own books.
  const auto d0_before = alloc.stats(dev(0)).allocated;
  const auto d1_before = alloc.stats(d1).allocated;
  {
    const Tensor on0 = Tensor::empty({1024}, ScalarType::Float32, dev(0));
    EXPECT_EQ(alloc.stats(dev(0)).allocated - d0_before, 4096);
    EXPECT_EQ(alloc.stats(d1).allocated, d1_before);
  }
  EXPECT_EQ(alloc.stats(dev(0)).allocated, d0_before);
}

TEST(Openreg, CopiesBetweenHostAndDevicesKeepValues) {
  const Tensor h = host_randn({5, 7}, 3);
  const Tensor a = h.to(dev(0));
  EXPECT_EQ(a.device(), dev(0));
  const Tensor b = a.to(dev(1));  // peer copy
  EXPECT_EQ(b.device(), dev(1));
  EXPECT_EQ(b.to_vector<float>(), h.to_vector<float>());
  // Strided views, broadcasting and dtype conversion in every direction.
  EXPECT_EQ(a.t().to(Device()).to_vector<float>(), h.t().contiguous().to_vector<float>());
  EXPECT_EQ(b.t().contiguous().to_vector<float>(), h.t().contiguous().to_vector<float>());
  EXPECT_EQ(a.to(ScalarType::Float64).to_vector<double>(),
            h.to(ScalarType::Float64).to_vector<double>());
  Tensor dst = ops::zeros({3, 5, 7}, ScalarType::Float64, dev(1));
  dst.copy_(a);  // openreg:0 float32 -> openreg:1 float64, broadcast over the first dim
  const auto got = dst.to_vector<double>();
  const auto want = h.to_vector<float>();
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(got[i], static_cast<double>(want[i % want.size()])) << i;
  Tensor col = ops::zeros({5, 7}, ScalarType::Float32, dev(0));
  col.narrow(1, 2, 1).copy_(ops::ones({5, 1}, ScalarType::Float32, dev(1)));
  EXPECT_EQ(ops::sum(col).item(), 5.0);
  EXPECT_EQ(col.select(1, 2).to_vector<float>(), std::vector<float>(5, 1.0f));
  // fill_ on a strided view, int and half dtypes.
  Tensor i = ops::zeros({4, 4}, ScalarType::Int64, dev(0));
  i.t().narrow(0, 1, 1).fill_(7);
  EXPECT_EQ(ops::sum(i).item(), 28.0);
  EXPECT_EQ(ops::full({3}, 1.5, ScalarType::Float16, dev(1)).to_vector<float>(),
            std::vector<float>(3, 1.5f));
}

TEST(Openreg, GeneratorsArePerDeviceWithSeedAndOffset) {
  auto& g0 = tb::rng::default_generator(dev(0));
  auto& g1 = tb::rng::default_generator(dev(1));
  EXPECT_NE(&g0, &g1);
  EXPECT_EQ(g0.device(), dev(0));
  g0.manual_seed(123);
  g1.manual_seed(123);
  Tensor a = Tensor::empty({1000}, ScalarType::Float32, dev(0));
  Tensor b = Tensor::empty({1000}, ScalarType::Float32, dev(1));
  ops::uniform_(a);
  ops::uniform_(b);
  // Same seed on two devices: the same stream; each draw reserves 4 of the offset.
  EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
  EXPECT_EQ(g0.get_offset(), 4u);
  // Drawing on device 0 does not move device 1's generator.
  ops::normal_(a);
  EXPECT_EQ(g0.get_offset(), 8u);
  EXPECT_EQ(g1.get_offset(), 4u);
  // Rewinding the offset repeats the numbers; a saved state restores them.
  const auto state = g0.get_state();
  Tensor x = Tensor::empty({37}, ScalarType::Float32, dev(0));
  ops::uniform_(x, -2.0, 3.0);
  const auto first = x.to_vector<float>();
  g0.set_offset(8);
  ops::uniform_(x, -2.0, 3.0);
  EXPECT_EQ(x.to_vector<float>(), first);
  g0.set_state(state);
  ops::uniform_(x, -2.0, 3.0);
  EXPECT_EQ(x.to_vector<float>(), first);
  for (float v : first) {
    EXPECT_GE(v, -2.0f);
    EXPECT_LT(v, 3.0f);
  }
  // The first element is the curand-compatible Philox draw at (seed, subsequence 0, offset 8).
  auto st = tb::rng::PhiloxState::init(123, 0, 8);
  EXPECT_EQ(first[0], tb::rng::uniform_from_curand(tb::rng::curand_uniform_from_bits(st.next4().x),
                                                   -2.0f, 3.0f));
  // float64: two elements per Philox block, two words each (element 1 = words z, w).
  Tensor x64 = Tensor::empty({3}, ScalarType::Float64, dev(0));
  g0.set_offset(8);
  ops::uniform_(x64);
  auto st64 = tb::rng::PhiloxState::init(123, 0, 8);
  const auto words = st64.next4();
  EXPECT_EQ(x64.to_vector<double>()[1], tb::rng::curand_uniform_double_from_bits(words.z, words.w));
  // normal_: moments of 200k draws; bernoulli_: its mean.
  Tensor n = Tensor::empty({200000}, ScalarType::Float64, dev(0));
  ops::normal_(n, 1.0, 2.0);
  const double mean = ops::mean(n).item();
  const double var = ops::mean(ops::square(ops::sub(n, mean))).item();
  EXPECT_NEAR(mean, 1.0, 0.03);
  EXPECT_NEAR(var, 4.0, 0.06);
  Tensor m = Tensor::empty({100000}, ScalarType::Float32, dev(0));
  ops::bernoulli_(m, 0.25);
  EXPECT_NEAR(ops::mean(m).item(), 0.25, 0.01);
  // A CPU generator cannot fill an openreg tensor.
  tb::rng::CpuGenerator cpu_gen(1);
  EXPECT_THAT(error_of([&] { ops::uniform_(x, 0.0, 1.0, &cpu_gen); }),
              HasSubstr("the generator is for cpu but the tensor is on openreg:0"));
}

TEST(Openreg, StreamsRunInOrderAndEventsTime) {
  openreg::Stream s(0);
  openreg::Event start;
  openreg::Event end;
  std::vector<int> order;
  start.record(s);
  s.enqueue([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    order.push_back(1);
  });
  EXPECT_FALSE(s.query());  // the first kernel sleeps 30 ms
  s.enqueue([&] { order.push_back(2); });
  end.record(s);
  end.synchronize();
  s.synchronize();
  EXPECT_TRUE(s.query());
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  EXPECT_GE(start.elapsed_ms(end), 25.0);
  openreg::Event never;
  EXPECT_THAT(error_of([&] { never.elapsed_ms(end); }), HasSubstr("start event"));
  // Kernels follow the current stream; an asynchronous failure surfaces at synchronize().
  {
    openreg::StreamGuard guard(s);
    EXPECT_EQ(&openreg::current_stream(0), &s);
    const Tensor t = ops::add(ops::ones({8}, ScalarType::Float32, dev(0)), 1.0);
    EXPECT_EQ(ops::sum(t).item(), 16.0);
  }
  EXPECT_EQ(&openreg::current_stream(0), &openreg::default_stream(0));
  s.enqueue([] { throw tb::ValueError("device fault injected"); });
  EXPECT_THAT(error_of([&] { s.synchronize(); }),
              HasSubstr("a kernel queued earlier on openreg:0"));
  EXPECT_NO_THROW(s.synchronize());  // reported once
  // A second stream waits for an event of the first.
  openreg::Stream other(0);
  openreg::Event gate;
  std::atomic<bool> released{false};
  s.enqueue([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    released = true;
  });
  gate.record(s);
  gate.block(other);
  bool seen = false;
  other.enqueue([&] { seen = released.load(); });
  other.synchronize();
  EXPECT_TRUE(seen);
}

// The device timer (core::DeviceTimer) marks the current stream without waiting; elapsed_ms()
// waits once and returns the time between marks, on the device's clock. The trainer reports
// its step phases with it.
TEST(Openreg, DeviceTimerMeasuresOnTheStreamWithoutWaiting) {
  EXPECT_EQ(tb::core::make_device_timer(Device()), nullptr);  // the CPU times on the host
  auto timer = tb::core::make_device_timer(dev(0));
  ASSERT_NE(timer, nullptr);
  openreg::Stream& s = openreg::current_stream(0);
  timer->mark();
  s.enqueue([] { std::this_thread::sleep_for(std::chrono::milliseconds(30)); });
  const auto t0 = std::chrono::steady_clock::now();
  timer->mark();
  s.enqueue([] { std::this_thread::sleep_for(std::chrono::milliseconds(10)); });
  timer->mark();
  // mark() did not wait for the 30 ms kernel.
  const double marking_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(marking_ms, 25.0);
  const auto d = timer->elapsed_ms();
  ASSERT_EQ(d.size(), 2u);
  EXPECT_GE(d[0], 25.0);
  EXPECT_GE(d[1], 8.0);
  EXPECT_TRUE(timer->elapsed_ms().empty());  // the marks were consumed
  // A run on the device reports its phases from the timer.
  tb::train::RunConfig c;
  c.run.steps = 3;
  c.run.device = "openreg:0";
  c.data.kind = "synthetic-blobs";
  c.data.batch_size = 16;
  c.data.workers = 0;
  tb::nn::MlpConfig m;
  m.input = 16;
  m.hidden = {32};
  m.classes = 4;
  c.model = m;
  struct Sink : tb::train::MetricSink {
    std::map<std::string, double> last;
    void on_metrics(std::int64_t, const tb::train::Metrics& ms) override {
      for (const auto& [k, v] : ms)
        last[k] = v;
    }
    void on_event(const std::string&, const std::string&) override {}
  };
  auto sink = std::make_shared<Sink>();
  tb::train::Trainer t(c);
  t.add_sink(sink);
  ASSERT_EQ(t.run().outcome, tb::train::RunOutcome::kFinished);
  for (const char* k : {"time.forward_ms", "time.backward_ms", "time.optimizer_ms"}) {
    ASSERT_EQ(sink->last.count(k), 1u) << k;
    EXPECT_GT(sink->last[k], 0.0) << k;
    EXPECT_LE(sink->last[k], sink->last["time.step_ms"]) << k;
  }
}

TEST(Openreg, MuonTimesNewtonSchulzWithDeviceEventsAndMatchesTheCpu) {
  // On a device Muon's step queues its work without reading anything back; the Newton-Schulz
  // time comes from device events, read by last_newton_schulz_ms() (once).
  tb::rng::CpuGenerator gen(21);
  const Tensor w0 = ops::randn({16, 24}, &gen);
  const Tensor g0 = ops::randn({16, 24}, &gen);
  auto make = [&](const Device& d) {
    Tensor w = tb::autograd::requires_grad_(w0.to(d, ScalarType::Float32, true));
    tb::autograd::set_grad(w, g0.to(d));
    return w;
  };
  const Tensor wc = make(Device());
  const Tensor wd = make(dev(0));
  tb::optim::Muon cpu({wc});
  tb::optim::Muon onreg({wd});
  cpu.step();
  onreg.step();
  const double ms = onreg.last_newton_schulz_ms();
  EXPECT_GT(ms, 0.0);
  EXPECT_EQ(onreg.last_newton_schulz_ms(), ms);  // read once, then kept
  EXPECT_GT(cpu.last_newton_schulz_ms(), 0.0);
  const auto a = wc.to_vector<float>();
  const auto b = wd.to(Device()).to_vector<float>();
  for (std::size_t i = 0; i < a.size(); ++i)
    ASSERT_EQ(a[i], b[i]) << i;  // openreg runs the CPU's arithmetic
  onreg.step();                  // a second step with the first step's marks already read
  EXPECT_GT(onreg.last_newton_schulz_ms(), 0.0);
}

TEST(Openreg, FallbackRunsTheCpuKernelAndCopiesMutatedArgumentsBack) {
  const Tensor h = host_randn({4, 6}, 9);
  const auto before = openreg::fallback_counts()["softmax"];
  const Tensor t = ops::softmax(h.to(dev(0)), 1);
  EXPECT_EQ(t.device(), dev(0));
  // The CPU kernel ran: bit equal.
  EXPECT_EQ(t.to_vector<float>(), ops::softmax(h, 1).to_vector<float>());
  EXPECT_EQ(openreg::fallback_counts()["softmax"], before + 1);
  // Tuple results come back to the device.
  auto [mx, idx] = ops::max(h.to(dev(1)), 1);
  EXPECT_EQ(mx.device(), dev(1));
  EXPECT_EQ(idx.device(), dev(1));
  EXPECT_EQ(idx.to_vector<std::int64_t>(), std::get<1>(ops::max(h, 1)).to_vector<std::int64_t>());
  // An op that mutates a list of tensors and a scalar: the GradScaler's unscale.
  std::vector<Tensor> grads = {h.to(dev(0)), ops::full({3}, INFINITY, ScalarType::Float32, dev(0))};
  Tensor found = ops::zeros({1}, ScalarType::Float32, dev(0));
  const Tensor inv = ops::full({1}, 0.5, ScalarType::Float32, dev(0));
  ops::amp_foreach_non_finite_check_and_unscale_(grads, found, inv);
  EXPECT_EQ(found.item(), 1.0);
  EXPECT_EQ(grads[0].to_vector<float>(), ops::mul(h, 0.5).to_vector<float>());
}

TEST(Openreg, DenyListAndPerOpFallback) {
  const auto saved = openreg::fallback_deny_list();
  EXPECT_THAT(saved, testing::Contains("randperm"));
  openreg::set_fallback_deny_list({"softmax"});
  const Tensor x = ops::ones({3}, ScalarType::Float32, dev(0));
  EXPECT_THAT(
      error_of([&] { ops::softmax(x, 0); }),
      HasSubstr("op 'softmax' has no openreg kernel and is on the CPU fallback's deny-list"));
  openreg::set_fallback_deny_list(saved);
  EXPECT_THAT(error_of([&] { ops::randperm(5, nullptr, ScalarType::Int64, dev(0)); }),
              HasSubstr("deny-list"));
  // Without the global fallback an op without a kernel fails naming itself and the device...
  openreg::set_global_fallback(false);
  EXPECT_FALSE(openreg::global_fallback_enabled());
  EXPECT_THAT(error_of([&] { ops::sum(x); }), HasSubstr("'sum'"));
  EXPECT_THAT(error_of([&] { ops::sum(x); }), HasSubstr("openreg:0"));
  {
    // ...until the fallback is registered for that op alone.
    auto h = openreg::register_fallback_for("sum");
    EXPECT_EQ(ops::sum(x).item(), 3.0);
    EXPECT_THAT(error_of([&] { ops::mean(x); }), HasSubstr("'mean'"));
  }
  EXPECT_THAT(error_of([&] { ops::sum(x); }), HasSubstr("'sum'"));
  openreg::set_global_fallback(true);
  EXPECT_EQ(ops::sum(x).item(), 3.0);
}

TEST(Openreg, WrapsAKernelThroughASafeHandleAndDeregistersIt) {
  using SoftmaxSig = tb::ops::sig::Softmax;
  auto& d = tb::dispatch::Dispatcher::singleton();
  const Tensor x = host_randn({3, 10}, 4).to(dev(0));
  const Tensor want = ops::softmax(x.to(Device()), 1);
  // Take the kernel softmax resolves to on openreg (the CPU fallback), wrap it, count the calls.
  const auto inner = d.get_kernel("softmax", tb::dispatch::DispatchKey::PrivateUse1);
  std::atomic<int> calls{0};
  auto reg = d.impl<SoftmaxSig>("softmax", tb::dispatch::DispatchKey::PrivateUse1,
                                [inner, &calls](const Tensor& t, std::int64_t dim) {
                                  ++calls;
                                  return inner.call<SoftmaxSig>(t, dim);
                                });
  EXPECT_EQ(ops::softmax(x, 1).to_vector<float>(), want.to_vector<float>());
  EXPECT_EQ(calls.load(), 1);
  const auto wrapper = d.get_kernel("softmax", tb::dispatch::DispatchKey::PrivateUse1);
  EXPECT_TRUE(wrapper.valid());
  reg.reset();  // deregistered: back to the fallback, and handles to the wrapper are dead
  EXPECT_EQ(ops::softmax(x, 1).to_vector<float>(), want.to_vector<float>());
  EXPECT_EQ(calls.load(), 1);
  EXPECT_FALSE(wrapper.valid());
  EXPECT_THAT(error_of([&] { wrapper.call<SoftmaxSig>(x, std::int64_t{1}); }),
              HasSubstr("SafeKernelFunction has been invalidated"));
  EXPECT_TRUE(inner.valid());  // the fallback itself is still registered
  // A kernel of openreg's own cannot be registered twice: replacing one means removing it first.
  EXPECT_THAT(error_of([&] {
                auto again =
                    d.impl<tb::ops::sig::Unary>("sigmoid", tb::dispatch::DispatchKey::PrivateUse1,
                                                [](const Tensor& t) { return t; });
              }),
              HasSubstr("sigmoid"));
}

TEST(Openreg, AutogradOnTheDeviceMatchesTheCpu) {
  const Tensor xh = host_randn({8, 5}, 1);
  const Tensor wh = host_randn({5, 3}, 2);
  auto grads = [](const Tensor& x0, const Tensor& w0) {
    Tensor w = tb::autograd::requires_grad_(w0.clone());
    const Tensor y = ops::relu(ops::mm(x0, w));
    const Tensor loss = ops::sum(ops::mul(y, y));
    tb::autograd::backward(loss);
    return std::make_pair(loss.item(), tb::autograd::grad(w).to(Device()).to_vector<float>());
  };
  const auto [lc, gc] = grads(xh, wh);
  const auto [lo, go] = grads(xh.to(dev(0)), wh.to(dev(0)));
  EXPECT_NEAR(lo, lc, 1e-4 * std::abs(lc));
  ASSERT_EQ(go.size(), gc.size());
  for (std::size_t i = 0; i < gc.size(); ++i)
    EXPECT_NEAR(go[i], gc[i], 1e-4f * (1.0f + std::abs(gc[i]))) << i;
}

// The MLP on openreg and on the CPU, same seed: bit for bit with the CPU fallback only, and within
// tolerance with openreg's own kernels.
tb::train::RunConfig mlp_config(const std::string& device) {
  tb::train::RunConfig c;
  c.run.seed = 11;
  c.run.steps = 8;
  c.run.device = device;
  c.data.kind = "synthetic-blobs";
  c.data.batch_size = 16;
  c.data.workers = 0;
  tb::nn::MlpConfig m;
  m.input = 16;
  m.hidden = {32};
  m.classes = 4;
  m.dropout = 0.1;
  c.model = m;
  c.optimizer.main = tb::train::OptimizerSettings("adamw");
  c.optimizer.main.set("lr", 1e-2);
  c.eval.interval = 4;
  return c;
}

struct LossSink : tb::train::MetricSink {
  std::vector<double> losses;
  std::vector<double> eval;
  void on_metrics(std::int64_t, const tb::train::Metrics& m) override {
    for (const auto& [k, v] : m) {
      if (k == "loss") losses.push_back(v);
      if (k == "eval.loss") eval.push_back(v);
    }
  }
  void on_event(const std::string&, const std::string&) override {}
};

std::shared_ptr<LossSink> train_on(const std::string& device,
                                   const std::function<void(tb::train::RunConfig&)>& edit = {},
                                   const std::filesystem::path& ckdir = {},
                                   const std::filesystem::path& resume = {}) {
  auto cfg = mlp_config(device);
  if (edit) edit(cfg);
  tb::train::Trainer t(cfg, ckdir);
  auto sink = std::make_shared<LossSink>();
  t.add_sink(sink);
  if (!resume.empty()) t.resume_from(resume);
  const auto r = t.run();
  EXPECT_EQ(r.outcome, tb::train::RunOutcome::kFinished) << r.message;
  return sink;
}

TEST(Openreg, TrainsTheMlpLikeTheCpu) {
  const auto cpu = train_on("cpu");
  ASSERT_EQ(cpu->losses.size(), 8u);
  openreg::set_native_kernels(false);
  const auto relu_before = openreg::fallback_counts()["relu"];
  const auto fallback_only = train_on("openreg:0");
  EXPECT_GT(openreg::fallback_counts()["relu"], relu_before);
  openreg::set_native_kernels(true);
  EXPECT_EQ(fallback_only->losses, cpu->losses);  // the CPU's kernels: the same bits
  EXPECT_EQ(fallback_only->eval, cpu->eval);
  const auto relu_native = openreg::fallback_counts()["relu"];
  const auto native = train_on("openreg:1");
  EXPECT_EQ(openreg::fallback_counts()["relu"], relu_native);  // openreg's own relu ran
  ASSERT_EQ(native->losses.size(), cpu->losses.size());
  for (std::size_t i = 0; i < cpu->losses.size(); ++i)
    EXPECT_NEAR(native->losses[i], cpu->losses[i], 1e-4 * std::abs(cpu->losses[i])) << i;
  // A device that does not exist fails before the run, naming the field and the reason.
  EXPECT_THAT(error_of([] { tb::train::Trainer t(mlp_config("openreg:5")); }),
              HasSubstr("run.device 'openreg:5': [openreg] no device openreg:5"));
}

// Mixed precision and checkpoints work on the device through the layers above the backend.
TEST(Openreg, AutocastScalerAndResumeOnTheDevice) {
  auto bf16 = [](tb::train::RunConfig& c) {
    c.amp.enabled = true;
    c.amp.dtype = "bf16";
  };
  const auto cpu = train_on("cpu", bf16);
  openreg::set_native_kernels(false);
  const auto dev_bf16 = train_on("openreg:0", bf16);
  openreg::set_native_kernels(true);
  ASSERT_EQ(cpu->losses.size(), 8u);
  EXPECT_EQ(dev_bf16->losses, cpu->losses);  // autocast on openreg = autocast on the CPU
  const auto fp16 = train_on("openreg:0", [](tb::train::RunConfig& c) {
    c.amp.enabled = true;
    c.amp.dtype = "fp16";
    c.amp.grad_scaler = true;
  });
  ASSERT_EQ(fp16->losses.size(), 8u);
  for (double l : fp16->losses)
    EXPECT_TRUE(std::isfinite(l));
  // A checkpoint written on openreg resumes to the uninterrupted run's losses.
  const tb::test::TempDir dir("tb_openreg_ckpt");
  auto every4 = [](tb::train::RunConfig& c) { c.checkpoint.interval = 4; };
  const auto full = train_on("openreg:1", every4, dir.path());
  ASSERT_TRUE(std::filesystem::exists(dir.path() / "step-00000004" / "optimizer.safetensors"));
  const auto resumed = train_on("openreg:1", every4, {}, dir.path() / "step-00000004");
  ASSERT_EQ(resumed->losses.size(), 4u);
  EXPECT_EQ(resumed->losses, std::vector<double>(full->losses.begin() + 4, full->losses.end()));
}

}  // namespace
