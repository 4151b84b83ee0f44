// CPU random kernels: uniform_, normal_, bernoulli_, bernoulli and randperm, drawing from the
// given generator or the CPU default, with PyTorch's CPU algorithms (bit-compatible streams).
#include <vector>

#include "engine/backends/cpu/capability_kernels.h"
#include "engine/dispatch/op_signatures.h"
#include "engine/rng/cpu_generator.h"
#include "engine/rng/cpu_sampling.h"
#include "engine/rng/generator.h"

namespace tb::cpu::TB_CPU_CAPABILITY {

using core::ScalarType;
using dispatch::DispatchKey;
namespace sig = ops::sig;

namespace {

rng::CpuGenerator& cpu_gen(const char* op, rng::Generator* gen) {
  rng::Generator& g = gen != nullptr ? *gen : rng::default_generator(core::Device());
  auto* c = dynamic_cast<rng::CpuGenerator*>(&g);
  TB_CHECK_T(TypeError, c != nullptr, "[", op,
             "] the CPU kernel needs a CPU generator, got one for ", g.device());
  return *c;
}

// Runs fill(contiguous buffer) and stores the result into t (in t's memory order).
template <typename Buf, typename Fill>
void fill_via(Tensor& t, ScalarType buf_dtype, Fill fill) {
  if (t.dtype() == buf_dtype && t.is_contiguous()) {
    fill(static_cast<Buf*>(t.data_ptr()), t.numel());
    return;
  }
  Tensor tmp = Tensor::empty(t.sizes(), buf_dtype, t.device());
  fill(static_cast<Buf*>(tmp.data_ptr()), tmp.numel());
  t.copy_(tmp);
}

void uniform_kernel(Tensor& t, double from, double to, rng::Generator* gen) {
  rng::CpuGenerator& g = cpu_gen("uniform_", gen);
  switch (t.dtype()) {
    case ScalarType::Float64:
      fill_via<double>(t, ScalarType::Float64,
                       [&](double* p, std::int64_t n) { rng::uniform_fill(g, p, n, from, to); });
      break;
    case ScalarType::Float32:
      fill_via<float>(t, ScalarType::Float32,
                      [&](float* p, std::int64_t n) { rng::uniform_fill(g, p, n, from, to); });
      break;
    case ScalarType::Float16:
    case ScalarType::BFloat16: {
      const int digits = t.dtype() == ScalarType::Float16 ? 11 : 8;
      fill_via<float>(t, ScalarType::Float32, [&](float* p, std::int64_t n) {
        rng::uniform_fill_digits(g, p, n, from, to, digits);
      });
      break;
    }
    default:
      throw TypeError(
          tb::detail::str_cat("[uniform_] expects a floating-point tensor, got ", t.dtype()));
  }
}

void normal_kernel(Tensor& t, double mean, double std, rng::Generator* gen) {
  rng::CpuGenerator& g = cpu_gen("normal_", gen);
  if (t.dtype() == ScalarType::Float64) {
    fill_via<double>(t, ScalarType::Float64, [&](double* p, std::int64_t n) {
      rng::normal_fill(g, p, n, mean, std, true);
    });
  } else {
    // float32 follows PyTorch bit for bit; 16-bit floats are drawn in float32 and rounded.
    fill_via<float>(t, ScalarType::Float32,
                    [&](float* p, std::int64_t n) { rng::normal_fill(g, p, n, mean, std, true); });
  }
}

void bernoulli_scalar_kernel(Tensor& t, double p, rng::Generator* gen) {
  rng::CpuGenerator& g = cpu_gen("bernoulli_", gen);
  fill_via<float>(t, ScalarType::Float32,
                  [&](float* out, std::int64_t n) { rng::bernoulli_fill(g, out, n, p); });
}

Tensor bernoulli_tensor_kernel(const Tensor& p, rng::Generator* gen) {
  rng::CpuGenerator& g = cpu_gen("bernoulli", gen);
  const Tensor pf = p.to(ScalarType::Float32).contiguous();
  const float* pp = pf.data_ptr<float>();
  for (std::int64_t i = 0; i < pf.numel(); ++i) {
    TB_CHECK(pp[i] >= 0.0f && pp[i] <= 1.0f, "[bernoulli] probabilities must be in [0, 1], got ",
             pp[i], " at flat index ", i);
  }
  Tensor out = Tensor::empty(p.sizes(), p.dtype(), p.device());
  fill_via<float>(out, ScalarType::Float32,
                  [&](float* o, std::int64_t n) { rng::bernoulli_fill(g, o, pp, n); });
  return out;
}

Tensor randperm_kernel(std::int64_t n, ScalarType dtype, core::Device device, rng::Generator* gen) {
  rng::CpuGenerator& g = cpu_gen("randperm", gen);
  Tensor out = Tensor::empty({n}, dtype, device);
  fill_via<std::int64_t>(out, ScalarType::Int64,
                         [&](std::int64_t* p, std::int64_t m) { rng::randperm(g, p, m); });
  return out;
}

}  // namespace

void register_random_kernels(dispatch::Dispatcher& d) {
  const auto cpu = DispatchKey::CPU;
  d.impl<sig::RandomFill>("uniform_", cpu, uniform_kernel).detach();
  d.impl<sig::RandomFill>("normal_", cpu, normal_kernel).detach();
  d.impl<sig::BernoulliScalar>("bernoulli_", cpu, bernoulli_scalar_kernel).detach();
  d.impl<sig::BernoulliTensor>("bernoulli", cpu, bernoulli_tensor_kernel).detach();
  d.impl<sig::Randperm>("randperm", cpu, randperm_kernel).detach();
}

}  // namespace tb::cpu::TB_CPU_CAPABILITY
