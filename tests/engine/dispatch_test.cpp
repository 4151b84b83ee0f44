// Dispatcher semantics (as PyTorch's aten/src/ATen/core/dispatch/OperatorEntry.cpp):
// registration by name and key, duplicates, missing-kernel messages, per-key fallbacks with
// boxing, the Autograd layer, safe kernel handles and their invalidation (SafeKernelFunction,
// PR 158393), the table dump, and concurrent dispatch during registration.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "engine/backends/openreg/backend.h"
#include "engine/core/error.h"
#include "engine/core/tensor.h"
#include "engine/dispatch/dispatcher.h"
#include "engine/ops/ops.h"
#include "tests/engine/test_util.h"

namespace {

using tb::core::Device;
using tb::core::DeviceType;
using tb::core::Tensor;
using tb::dispatch::Dispatcher;
using tb::dispatch::DispatchKey;
using tb::dispatch::DispatchKeySet;
using tb::dispatch::OperatorHandle;
using tb::dispatch::RegistrationHandle;
using tb::dispatch::Stack;
namespace ops = tb::ops;

using UnarySig = Tensor(const Tensor&);

// Test ops are defined once per process, with names no built-in uses.
Dispatcher& dispatcher_with_test_ops() {
  static const bool defined = [] {
    auto& d = Dispatcher::singleton();
    d.define<UnarySig>("test.double_it", {{}, true, "doubles its input"});
    d.define<UnarySig>("test.fallback_target");
    d.define<UnarySig>("test.wrapped");
    d.define<UnarySig>("test.concurrent");
    return true;
  }();
  (void)defined;
  return Dispatcher::singleton();
}

Tensor doubled(const Tensor& x) {
  return ops::mul(x, 2.0);
}

// A tensor that claims to live on the PrivateUse1 device. It has no memory: kernels in these
// tests never read it, which is exactly what a missing-kernel or fallback path must not need.
Tensor fake_device_tensor() {
  auto impl = std::make_shared<tb::core::TensorImpl>();
  impl->storage = std::make_shared<tb::core::StorageImpl>(tb::core::DataPtr(), 0);
  impl->sizes = {2};
  impl->strides = {1};
  impl->device = Device(DeviceType::PrivateUse1, 0);
  return Tensor(impl);
}

// These tests own the PrivateUse1 key: the openreg backend that normally sits there steps aside
// for the test's lifetime (its kernels and fallback are re-registered afterwards).
struct FreePrivateUse1 {
  FreePrivateUse1() {
    Dispatcher::singleton();
    tb::openreg::set_dispatcher_registration(false);
  }
  ~FreePrivateUse1() { tb::openreg::set_dispatcher_registration(true); }
  FreePrivateUse1(const FreePrivateUse1&) = delete;
  FreePrivateUse1& operator=(const FreePrivateUse1&) = delete;
};

using tb::test::error_of;

TEST(Dispatch, RegisteredKernelRunsAndDeregistersWithItsHandle) {
  auto& d = dispatcher_with_test_ops();
  const auto op = d.typed<UnarySig>("test.double_it");
  {
    RegistrationHandle h = d.impl<UnarySig>("test.double_it", DispatchKey::CPU, doubled);
    const Tensor y = op.call(tb::core::from_vector(std::vector<float>{1.5f, -2.0f}));
    EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{3.0f, -4.0f}));
    EXPECT_TRUE(op.handle().entry().has_kernel(DispatchKey::CPU));
  }
  EXPECT_FALSE(op.handle().entry().has_kernel(DispatchKey::CPU));
  EXPECT_NE(error_of([&] { op.call(ops::ones({2})); }).find("has no kernel for device cpu"),
            std::string::npos);
}

TEST(Dispatch, DuplicateRegistrationIsAnError) {
  auto& d = dispatcher_with_test_ops();
  RegistrationHandle first = d.impl<UnarySig>("test.double_it", DispatchKey::CPU, doubled);
  const std::string msg =
      error_of([&] { auto h = d.impl<UnarySig>("test.double_it", DispatchKey::CPU, doubled); });
  EXPECT_NE(msg.find("op 'test.double_it' already has a kernel for key CPU (registered at "
                     "tests/engine/dispatch_test.cpp:"),
            std::string::npos)
      << msg;
  first.reset();
  RegistrationHandle second = d.impl<UnarySig>("test.double_it", DispatchKey::CPU, doubled);
  EXPECT_TRUE(second.active());
}

TEST(Dispatch, DefiningAnOpTwiceIsAnError) {
  auto& d = dispatcher_with_test_ops();
  EXPECT_NE(error_of([&] { d.define<UnarySig>("test.double_it"); }).find("is already defined"),
            std::string::npos);
}

TEST(Dispatch, WrongSignatureIsRejected) {
  auto& d = dispatcher_with_test_ops();
  using Wrong = Tensor(const Tensor&, const Tensor&);
  EXPECT_THROW(d.typed<Wrong>("test.double_it"), tb::TypeError);
  EXPECT_THROW(
      {
        auto h = d.impl<Wrong>("test.double_it", DispatchKey::CPU,
                               [](const Tensor& a, const Tensor&) { return a; });
      },
      tb::TypeError);
}

TEST(Dispatch, MissingKernelNamesOpDeviceAndWhereItExists) {
  const FreePrivateUse1 free_key;
  // Built-in op: softmax has a CPU kernel, none for the PrivateUse1 device.
  const Tensor x = fake_device_tensor();
  const std::string msg = error_of([&] { ops::softmax(x, 0); });
  // (", cuda" follows in builds with the CUDA backend.)
  EXPECT_EQ(msg.substr(0, msg.find("cpu") + 3),
            "[dispatch] op 'softmax' has no kernel for device openreg:0 (dispatch key "
            "PrivateUse1); it is available on: cpu");
  EXPECT_TRUE(msg.ends_with("cpu") || msg.ends_with("cpu, cuda")) << msg;
  // An op with no kernel anywhere says so.
  auto& d = dispatcher_with_test_ops();
  const auto op = d.typed<UnarySig>("test.fallback_target");
  EXPECT_NE(error_of([&] { op.call(x); }).find("no device has a kernel for it"), std::string::npos);
}

TEST(Dispatch, PerKeyFallbackHandlesEveryOpInBoxedForm) {
  const FreePrivateUse1 free_key;
  auto& d = dispatcher_with_test_ops();
  RegistrationHandle cpu = d.impl<UnarySig>("test.fallback_target", DispatchKey::CPU, doubled);
  std::vector<std::string> seen;
  // A CPU fallback in miniature: swap device tensors for CPU ones, run the CPU kernel boxed.
  RegistrationHandle fb = d.fallback(
      DispatchKey::PrivateUse1, [&seen](const OperatorHandle& op, DispatchKeySet, Stack& stack) {
        seen.push_back(op.name());
        for (auto& iv : stack) {
          if (iv.is_tensor() && iv.tensor().device().type() == DeviceType::PrivateUse1) {
            iv = ops::full({2}, 5.0);
          }
        }
        op.call_boxed_at(DispatchKey::CPU, stack);
      });
  const auto op = d.typed<UnarySig>("test.fallback_target");
  const Tensor y = op.call(fake_device_tensor());
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{10.0f, 10.0f}));
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], "test.fallback_target");
  // The fallback serves built-in ops too.
  const Tensor z = ops::neg(fake_device_tensor());
  EXPECT_EQ(z.to_vector<float>(), (std::vector<float>{-5.0f, -5.0f}));
  EXPECT_EQ(seen.back(), "neg");
  // Only one fallback per key.
  EXPECT_NE(error_of([&] {
              auto h = d.fallback(DispatchKey::PrivateUse1,
                                  [](const OperatorHandle&, DispatchKeySet, Stack&) {});
            }).find("already has a fallback"),
            std::string::npos);
  // A direct kernel wins over the fallback.
  {
    RegistrationHandle direct = d.impl<UnarySig>("test.fallback_target", DispatchKey::PrivateUse1,
                                                 [](const Tensor&) { return ops::zeros({1}); });
    EXPECT_EQ(op.call(fake_device_tensor()).numel(), 1);
  }
  fb.reset();
  EXPECT_THROW(op.call(fake_device_tensor()), tb::NotImplementedError);
}

TEST(Dispatch, AutogradLayerRunsOnlyForTensorsThatRequireGrad) {
  auto& d = dispatcher_with_test_ops();
  RegistrationHandle cpu = d.impl<UnarySig>("test.double_it", DispatchKey::CPU, doubled);
  const auto op = d.typed<UnarySig>("test.double_it");
  int layer_calls = 0;
  RegistrationHandle ag =
      d.impl<UnarySig>("test.double_it", DispatchKey::Autograd, [&](const Tensor& x) {
        ++layer_calls;
        tb::dispatch::ExcludeKeysGuard below{DispatchKeySet(DispatchKey::Autograd)};
        return op.call(x);  // redispatch to the backend
      });
  Tensor x = ops::ones({3});
  op.call(x);
  EXPECT_EQ(layer_calls, 0);
  x.impl()->requires_grad = true;
  const Tensor y = op.call(x);
  EXPECT_EQ(layer_calls, 1);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{2.0f, 2.0f, 2.0f}));
  {
    tb::dispatch::ExcludeKeysGuard no_grad{DispatchKeySet(DispatchKey::Autograd)};
    op.call(x);
  }
  EXPECT_EQ(layer_calls, 1);
  // Without its own Autograd kernel the op reaches the autograd fallback, which needs a
  // derivative rule for a differentiable op; below the layer the backend still runs.
  ag.reset();
  EXPECT_NE(error_of([&] { op.call(x); }).find("op 'test.double_it' has no derivative rule"),
            std::string::npos);
  tb::dispatch::ExcludeKeysGuard below{DispatchKeySet(DispatchKey::Autograd)};
  EXPECT_EQ(op.call(x).to_vector<float>(), (std::vector<float>{2.0f, 2.0f, 2.0f}));
}

TEST(SafeKernelHandle, IsInvalidatedWhenItsKernelIsDeregistered) {
  auto& d = dispatcher_with_test_ops();
  auto reg = std::make_unique<RegistrationHandle>(
      d.impl<UnarySig>("test.double_it", DispatchKey::CPU, doubled));
  const auto handle = d.get_kernel("test.double_it", DispatchKey::CPU);
  EXPECT_TRUE(handle.valid());
  EXPECT_NE(handle.debug().find("test.double_it"), std::string::npos);
  const Tensor y = handle.call<UnarySig>(ops::full({1}, 4.0));
  EXPECT_EQ(y.item(), 8.0);
  // Boxed call through the handle.
  Stack s{tb::dispatch::IValue(ops::full({1}, 1.0))};
  handle.call_boxed(s);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].tensor().item(), 2.0);

  reg.reset();
  EXPECT_FALSE(handle.valid());
  const std::string msg = error_of([&] { handle.call<UnarySig>(ops::ones({1})); });
  EXPECT_NE(msg.find("SafeKernelFunction has been invalidated (op test.double_it, key CPU"),
            std::string::npos)
      << msg;
}

TEST(SafeKernelHandle, WrapsAnExistingKernel) {
  const FreePrivateUse1 free_key;
  // torch.library.get_kernel's pattern (PR 158393): capture the original, register a kernel
  // that forwards to it.
  auto& d = dispatcher_with_test_ops();
  RegistrationHandle cpu = d.impl<UnarySig>("test.wrapped", DispatchKey::CPU, doubled);
  const auto original = d.get_kernel("test.wrapped", "CPU");
  int forwarded = 0;
  RegistrationHandle wrapper =
      d.impl<UnarySig>("test.wrapped", DispatchKey::PrivateUse1, [&](const Tensor&) {
        ++forwarded;
        return original.call<UnarySig>(ops::full({2}, 3.0));
      });
  const auto op = d.typed<UnarySig>("test.wrapped");
  EXPECT_EQ(op.call(fake_device_tensor()).to_vector<float>(), (std::vector<float>{6.0f, 6.0f}));
  EXPECT_EQ(forwarded, 1);
  cpu.reset();  // the wrapped kernel goes away: the wrapper now fails clearly, never dangles
  EXPECT_NE(error_of([&] { op.call(fake_device_tensor()); }).find("has been invalidated"),
            std::string::npos);
}

TEST(SafeKernelHandle, LookupErrors) {
  const FreePrivateUse1 free_key;
  auto& d = dispatcher_with_test_ops();
  EXPECT_EQ(error_of([&] { d.get_kernel("test.nope", DispatchKey::CPU); }),
            "operator test.nope does not exist");
  EXPECT_EQ(error_of([&] { d.get_kernel("add", "GPU"); }), "Invalid dispatch key: GPU");
  EXPECT_NE(error_of([&] { d.get_kernel("add", DispatchKey::PrivateUse1); }).find("has no kernel"),
            std::string::npos);
  EXPECT_TRUE(d.get_kernel("add", DispatchKey::Autocast).valid());  // the autocast fallback
  EXPECT_TRUE(d.get_kernel("add", DispatchKey::Autograd).valid());  // the autograd fallback
}

TEST(Dispatch, DumpListsEveryEntryWithItsOrigin) {
  auto& d = dispatcher_with_test_ops();
  RegistrationHandle cpu = d.impl<UnarySig>("test.double_it", DispatchKey::CPU, doubled);
  bool found_test = false;
  bool found_add = false;
  for (const auto& row : d.dump()) {
    if (row.op == "test.double_it" && row.key == DispatchKey::CPU) {
      found_test = true;
      EXPECT_EQ(row.source, tb::dispatch::KernelSource::Kernel);
      EXPECT_EQ(row.where.rfind("tests/engine/dispatch_test.cpp:", 0), 0u) << row.where;
    }
    if (row.op == "add" && row.key == DispatchKey::CPU) {
      found_add = true;
      EXPECT_NE(row.where.find("engine/backends/cpu/elementwise_kernels.cpp"), std::string::npos);
    }
    if (row.op == "add" && row.key == DispatchKey::Autograd) {
      EXPECT_EQ(row.source, tb::dispatch::KernelSource::Fallback);  // the autograd layer
      EXPECT_NE(row.where.find("engine/autograd/autograd.cpp"), std::string::npos) << row.where;
    }
    if (row.op == "add" && row.key == DispatchKey::Autocast) {
      EXPECT_EQ(row.source, tb::dispatch::KernelSource::Fallback);  // the autocast layer
      EXPECT_NE(row.where.find("engine/amp/autocast.cpp"), std::string::npos) << row.where;
    }
  }
  EXPECT_TRUE(found_test);
  EXPECT_TRUE(found_add);
}

TEST(Dispatch, ConcurrentCallsWhileKernelsComeAndGo) {
  auto& d = dispatcher_with_test_ops();
  RegistrationHandle cpu = d.impl<UnarySig>("test.concurrent", DispatchKey::CPU, doubled);
  const auto op = d.typed<UnarySig>("test.concurrent");
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 3; ++t) {
    callers.emplace_back([&] {
      const Tensor x = ops::full({4}, 1.0);
      while (!stop.load()) {
        if (op.call(x).to_vector<float>()[3] != 2.0f) bad.fetch_add(1);
      }
    });
  }
  for (int i = 0; i < 300; ++i) {
    RegistrationHandle other =
        d.impl<UnarySig>("test.concurrent", DispatchKey::PrivateUse1, doubled);
    auto h = d.get_kernel("test.concurrent", DispatchKey::CPU);
    EXPECT_TRUE(h.valid());
  }
  stop = true;
  for (auto& th : callers)
    th.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(DispatchKeys, NamesRoundTrip) {
  for (int i = 0; i < tb::dispatch::kNumDispatchKeys; ++i) {
    const auto k = static_cast<DispatchKey>(i);
    EXPECT_EQ(tb::dispatch::parse_dispatch_key(tb::dispatch::dispatch_key_name(k)), k);
  }
  DispatchKeySet s;
  s = s.add(DispatchKey::CPU).add(DispatchKey::Autograd);
  EXPECT_EQ(s.highest(), DispatchKey::Autograd);
  EXPECT_EQ(s.remove(DispatchKey::Autograd).highest(), DispatchKey::CPU);
}

}  // namespace

// A host<->device copy skips the CPU key for its own dispatch only: the device's copy_ kernel
// may convert on the host with CPU ops (found on a real GPU, where the CUDA copy_ converts the
// dtype on the host first). Also through the autograd layer, which must keep CPU skipped.
TEST(Dispatch, CrossDeviceCopySkipsCpuOnlyForItsOwnDispatch) {
  const FreePrivateUse1 free_key;
  auto& d = Dispatcher::singleton();
  int device_copies = 0;
  RegistrationHandle h = d.impl<void(Tensor&, const Tensor&)>(
      "copy_", DispatchKey::PrivateUse1, [&](Tensor& dst, const Tensor&) {
        ++device_copies;
        // Host-side work inside the device kernel: a CPU conversion and a CPU fill.
        const Tensor host = ops::full({2}, 1.5, tb::core::ScalarType::Float64).to(dst.dtype());
        dst.copy_(host);
      });
  Tensor dst = ops::zeros({2});
  ops::copy_(dst, fake_device_tensor());
  EXPECT_EQ(device_copies, 1);
  EXPECT_EQ(dst.to_vector<float>(), (std::vector<float>{1.5f, 1.5f}));
  Tensor src = fake_device_tensor();
  src.impl()->requires_grad = true;  // routes the call through the autograd layer first
  src.impl()->dtype = tb::core::ScalarType::Float32;
  Tensor dst2 = ops::zeros({2});
  ops::copy_(dst2, src);
  EXPECT_EQ(device_copies, 2);
  EXPECT_EQ(dst2.to_vector<float>(), (std::vector<float>{1.5f, 1.5f}));
}
