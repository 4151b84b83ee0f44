// CUDA backend tests (label "cuda"). Without a GPU (or without a driver) every test is skipped
// with the reason the engine reports; on a GPU machine they compare against the CPU kernels.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/api/engine_api.h"
#include "engine/autograd/autograd.h"
#include "engine/backends/cuda/cuda_status.h"
#include "engine/core/allocator.h"
#include "engine/core/error.h"
#include "engine/core/math_mode.h"
#include "engine/nn/kv_cache.h"
#include "engine/nn/models.h"
#include "engine/ops/ops.h"
#include "engine/rng/generator.h"
#include "engine/train/sample.h"
#include "engine/train/trainer.h"
#include "tests/engine/tiny_models.h"

namespace {

using tb::core::Device;
using tb::core::DeviceType;
using tb::core::ScalarType;
using tb::core::Tensor;
namespace ops = tb::ops;

const Device kGpu(DeviceType::CUDA, 0);

// (Backends are loaded as Device::parse would: a test may name cuda:0 directly.)
#define REQUIRE_GPU()                                                         \
  do {                                                                        \
    tb::core::load_backends();                                                \
    const auto st = tb::backends::cuda_status();                              \
    if (st.device_count == 0) GTEST_SKIP() << "no usable GPU: " << st.reason; \
  } while (false)

TEST(Cuda, StatusExplainsItself) {
  const auto st = tb::backends::cuda_status();
  EXPECT_TRUE(st.compiled);
  if (st.device_count == 0) {
    EXPECT_FALSE(st.reason.empty());
    // Without a driver or GPU the reason says so and what to do before the runtime's words.
    if (st.reason.find("cudaErrorInsufficientDriver") != std::string::npos ||
        st.reason.find("cudaErrorNoDevice") != std::string::npos) {
      EXPECT_NE(st.reason.find("run.device = \"cpu\""), std::string::npos) << st.reason;
      EXPECT_LT(st.reason.find("run.device"), st.reason.find("The CUDA runtime reports"))
          << st.reason;
    }
    // A config naming cuda fails with that reason, and nothing crashes.
    try {
      Tensor::empty({4}, ScalarType::Float32, kGpu);
      FAIL() << "allocation on cuda:0 succeeded without a device";
    } catch (const tb::Error& e) {
      EXPECT_NE(std::string(e.what()).find(st.reason), std::string::npos) << e.what();
    }
    // Choosing a CUDA GEMM backend says up front that no device can use it.
    const auto choice = tb::api::set_gemm_backend("cublaslt");
    EXPECT_NE(choice.warning.find("no CUDA device can use it here: " + st.reason),
              std::string::npos)
        << choice.warning;
    tb::api::set_gemm_backend("auto");
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
  try {
    // randperm has no CUDA kernel (data order is drawn on the host; CUDA has no CPU fallback).
    (void)ops::randperm(8, nullptr, ScalarType::Int64, kGpu);
    FAIL();
  } catch (const tb::NotImplementedError& e) {
    EXPECT_NE(std::string(e.what()).find("op 'randperm' has no kernel for device cuda:0"),
              std::string::npos)
        << e.what();
  }
}

// The random kernels share their arithmetic with openreg (engine/backends/common/random_math.h),
// whose streams the openreg tests check against PhiloxState: same seed, same numbers.
TEST(Cuda, RandomStreamsEqualOpenregs) {
  REQUIRE_GPU();
  const Device reg(DeviceType::PrivateUse1, 0);
  for (ScalarType dt :
       {ScalarType::Float32, ScalarType::Float64, ScalarType::Float16, ScalarType::BFloat16}) {
    for (int kind = 0; kind < 3; ++kind) {
      std::vector<std::vector<double>> got;
      for (const Device& d : {kGpu, reg}) {
        auto& g = tb::rng::default_generator(d);
        g.manual_seed(77);
        Tensor t = Tensor::empty({1001}, dt, d);
        if (kind == 0) ops::uniform_(t, -2.0, 3.0);
        if (kind == 1) ops::normal_(t, 0.5, 2.0);
        if (kind == 2) ops::bernoulli_(t, 0.25);
        got.push_back(t.to(Device()).to_vector<double>());
      }
      ASSERT_EQ(got[0].size(), got[1].size());
      for (std::size_t i = 0; i < got[0].size(); ++i) {
        // normal_ uses sin/cos/log: the device's libm may differ in the last bit.
        const double tol = kind == 1 ? 1e-5 * (1.0 + std::abs(got[1][i])) : 0.0;
        ASSERT_NEAR(got[0][i], got[1][i], tol) << "kind " << kind << " dtype " << dt << " @" << i;
      }
    }
  }
}

// Index and target errors are found on the device and raised with the CPU's message; the
// device stays usable afterwards.
TEST(Cuda, BadIndicesRaiseAndTheDeviceStaysUsable) {
  REQUIRE_GPU();
  const Tensor w = ops::ones({5, 3}).to(kGpu);
  const Tensor idx = tb::core::from_vector<std::int64_t>({1, 9, 2}, {3}).to(kGpu);
  try {
    (void)ops::index_select(w, 0, idx);
    FAIL();
  } catch (const tb::IndexError& e) {
    EXPECT_NE(std::string(e.what()).find("index 9 is out of range for dimension 0 with size 5"),
              std::string::npos)
        << e.what();
  }
  const Tensor ok = ops::sum(ops::mul(w, 2.0)).to(Device());
  EXPECT_EQ(ok.item(), 30.0);
}

// gemm_backend = "cublaslt" (with the bias epilogue) and TF32 give the cuBLAS results.
TEST(Cuda, CublasLtAndTf32MatchCublas) {
  REQUIRE_GPU();
  auto gen = tb::rng::make_generator(Device());
  gen->manual_seed(8);
  const Tensor a = ops::randn({96, 200}, gen.get());
  const Tensor b = ops::randn({200, 64}, gen.get());
  const Tensor bias = ops::randn({64}, gen.get());
  const auto ref = ops::addmm(bias, a, b).to_vector<float>();
  for (const char* backend : {"cublas", "cublaslt"}) {
    const auto choice = tb::api::set_gemm_backend(backend);
    EXPECT_EQ(choice.warning.find("no CUDA device can use it"), std::string::npos)
        << choice.warning;
    const auto got =
        ops::addmm(bias.to(kGpu), a.to(kGpu), b.to(kGpu)).to(Device()).to_vector<float>();
    for (std::size_t k = 0; k < ref.size(); ++k)
      ASSERT_NEAR(got[k], ref[k], 1e-3f) << backend << " @" << k;
    // A broadcast batch operand (batch stride 0) goes to the batched GEMM as is.
    const Tensor bb = b.unsqueeze(0).expand({2, 200, 64});
    const auto bm =
        ops::bmm(a.reshape({2, 48, 200}).to(kGpu), b.to(kGpu).unsqueeze(0).expand({2, 200, 64}))
            .to(Device());
    const auto bc = ops::bmm(a.reshape({2, 48, 200}), bb);
    const auto x = bm.to_vector<float>();
    const auto y = bc.to_vector<float>();
    for (std::size_t k = 0; k < y.size(); ++k)
      ASSERT_NEAR(x[k], y[k], 1e-3f) << backend << " bmm @" << k;
  }
  tb::core::set_allow_tf32(true);
  const auto tf = ops::mm(a.to(kGpu), b.to(kGpu)).to(Device()).to_vector<float>();
  tb::core::set_allow_tf32(false);
  const auto exact = ops::mm(a, b).to_vector<float>();
  for (std::size_t k = 0; k < exact.size(); ++k)
    ASSERT_NEAR(tf[k], exact[k], 5e-2f) << "tf32 @" << k;  // 10-bit mantissa inputs
  tb::api::set_gemm_backend("auto");
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

// Step phases are timed with CUDA events: marks do not wait, one read per step.
TEST(Cuda, DeviceTimerUsesEvents) {
  REQUIRE_GPU();
  auto timer = tb::core::make_device_timer(kGpu);
  ASSERT_NE(timer, nullptr);
  const Tensor a = ops::ones({256, 256}).to(kGpu);
  timer->mark();
  Tensor x = a;
  for (int i = 0; i < 4; ++i)
    x = ops::mm(x, a);
  timer->mark();
  timer->mark();
  const auto d = timer->elapsed_ms();
  ASSERT_EQ(d.size(), 2u);
  EXPECT_GE(d[0], 0.0);
  EXPECT_GE(d[1], 0.0);
  EXPECT_TRUE(timer->elapsed_ms().empty());
}

// Training on cuda:0 follows the CPU: the MLP (AdamW, Muon with fp32 Newton-Schulz, bf16
// autocast, EMA), qwen-tiny on synthetic text and a small residual CNN with batch norm and
// pooling (its 16 features as 1×4×4 images), same seed, losses within tolerance.
struct LossSink : tb::train::MetricSink {
  std::vector<double> losses;
  void on_metrics(std::int64_t, const tb::train::Metrics& m) override {
    for (const auto& [k, v] : m)
      if (k == "loss" || k == "eval.loss") losses.push_back(v);
  }
  void on_event(const std::string&, const std::string&) override {}
};

enum class Net { kMlp, kQwen, kCnn };

std::vector<double> train(const std::string& device, Net net,
                          const std::function<void(tb::train::RunConfig&)>& edit) {
  tb::train::RunConfig c;
  c.run.seed = 5;
  c.run.steps = 4;
  c.run.device = device;
  c.data.workers = 0;
  c.data.batch_size = 8;
  c.eval.interval = 2;  // evaluation runs on the device too, briefly
  c.eval.batches = 2;
  if (net == Net::kQwen) {
    c.data.kind = "synthetic-text";
    c.data.context_length = 16;
    tb::nn::QwenTinyConfig q;
    q.vocab = 256;  // bytes
    q.d_model = 32;
    q.n_layers = 2;
    q.n_heads = 4;
    q.context_length = 16;
    c.model = q;
  } else if (net == Net::kCnn) {
    c.data.kind = "synthetic-blobs";
    c.model = tb::nn::model_config_from_json({{"kind", "cnn"},
                                              {"input", {1, 4, 4}},
                                              {"channels", {4, 8}},
                                              {"residual", true},
                                              {"classes", 4}});
  } else {
    c.data.kind = "synthetic-blobs";
    tb::nn::MlpConfig m;
    m.input = 16;
    m.hidden = {64, 64};
    m.classes = 4;
    c.model = m;
  }
  c.optimizer.main = tb::train::OptimizerSettings("adamw");
  c.optimizer.main.set("lr", 3e-3);
  if (edit) edit(c);
  tb::train::Trainer t(c);
  auto sink = std::make_shared<LossSink>();
  t.add_sink(sink);
  const auto r = t.run();
  EXPECT_EQ(r.outcome, tb::train::RunOutcome::kFinished) << r.message;
  return sink->losses;
}

// Sampling on the device with a key/value cache: the buffers live on the GPU, new keys are copied
// into a narrowed slice, and one query attends over every cached key (not causal, T = 1 < S). Each
// step's logits match the CPU model's whole-sequence forward, and greedy tokens are the CPU's.
TEST(Cuda, AKeyValueCacheOnTheDeviceGivesTheCpusLogits) {
  REQUIRE_GPU();
  const std::function<std::shared_ptr<tb::nn::Model>()> makers[] = {
      [] { return tb::test::tiny_qwen(12, /*grouped=*/true); },
      [] { return tb::test::tiny_gpt(12); }};
  for (const auto& make : makers) {
    const auto cpu = make();
    const auto dev = make();
    dev->to(kGpu);
    cpu->eval();
    dev->eval();
    tb::autograd::NoGradGuard no_grad;
    const std::int64_t vocab = tb::train::language_model_shape(*cpu).first;
    std::vector<std::int64_t> seq = {3, 14, 15, 92};
    auto tokens = [](const std::vector<std::int64_t>& ids, std::size_t from) {
      Tensor t =
          Tensor::empty({1, static_cast<std::int64_t>(ids.size() - from)}, ScalarType::Int64);
      std::copy(ids.begin() + static_cast<long>(from), ids.end(), t.data_ptr<std::int64_t>());
      return t;
    };
    tb::nn::KvCache cache(12);
    while (seq.size() <= 12) {
      const auto past = static_cast<std::size_t>(cache.length());
      Tensor out;
      {
        tb::nn::ScopedKvCache scope(cache);
        out = dev->forward(tokens(seq, past).to(kGpu));
      }
      cache.commit(static_cast<std::int64_t>(seq.size() - past));
      const Tensor a = out.select(1, out.size(1) - 1).to(Device()).contiguous();
      const Tensor whole = cpu->forward(tokens(seq, 0));
      const Tensor b = whole.select(1, whole.size(1) - 1).contiguous();
      for (std::int64_t v = 0; v < vocab; ++v)
        ASSERT_NEAR(a.data_ptr<float>()[v], b.data_ptr<float>()[v], 1e-4)
            << cpu->config().kind << " position " << seq.size() << " id " << v;
      seq.push_back((seq.back() * 31 + 7) % vocab);
    }
    tb::train::SampleOptions o;
    o.tokens = 15;  // past the context: the window slides
    o.temperature = 0.0;
    EXPECT_EQ(tb::train::sample_tokens(*dev, {5, 6, 7}, o),
              tb::train::sample_tokens(*cpu, {5, 6, 7}, o))
        << cpu->config().kind;
  }
}

TEST(Cuda, TrainsLikeTheCpu) {
  REQUIRE_GPU();
  const std::vector<std::pair<std::string, std::function<void(tb::train::RunConfig&)>>> variants = {
      {"adamw", {}},
      {"muon fp32",
       [](tb::train::RunConfig& c) {
         c.optimizer.main = tb::train::OptimizerSettings("muon");
         c.optimizer.main.set("lr", 0.02);
         c.optimizer.main.set("ns_dtype", "fp32");
         c.optimizer.adamw = tb::train::OptimizerSettings{};
         c.optimizer.adamw->kind = "adamw";
         c.optimizer.adamw->set("lr", 3e-3);
       }},
      {"bf16 autocast",
       [](tb::train::RunConfig& c) {
         c.amp.enabled = true;
         c.amp.dtype = "bf16";
       }},
      {"ema", [](tb::train::RunConfig& c) { c.swa.kind = "ema"; }}};
  for (const Net net : {Net::kMlp, Net::kQwen, Net::kCnn}) {
    const char* model = net == Net::kMlp ? "mlp " : net == Net::kQwen ? "qwen-tiny " : "cnn ";
    for (const auto& [name, edit] : variants) {
      const auto cpu = train(std::string("cpu"), net, edit);
      const auto gpu = train(kGpu.str(), net, edit);
      ASSERT_EQ(cpu.size(), gpu.size()) << name;
      // bf16 rounds differently with a different summation order.
      const double rel = name == "bf16 autocast" ? 2e-2 : 2e-3;
      for (std::size_t i = 0; i < cpu.size(); ++i) {
        EXPECT_NEAR(gpu[i], cpu[i], rel * std::abs(cpu[i])) << model << name << " step " << i;
      }
    }
  }
}

}  // namespace
