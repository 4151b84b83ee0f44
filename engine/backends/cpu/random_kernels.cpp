// CPU random kernels: uniform_, normal_, bernoulli_, bernoulli and randperm, drawing from the
// given generator or the CPU default, with PyTorch's CPU algorithms (bit-compatible streams).
#include <limits>
#include <numbers>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

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

#if defined(__AVX2__) && defined(__FMA__)
// PyTorch's normal_fill_16_AVX2 (aten/src/ATen/native/cpu/DistributionTemplates.h) with
// log256_ps and sincos256_ps of avx_mathfun.h, which x86-64 PyTorch runs for float32 normal_.
// Operation for operation it is the portable block of engine/rng/cpu_sampling.cpp (where GCC
// fuses a product into the following sum in PyTorch's build, both use an explicit FMA), so the
// two give the same bits; the tests compare them over millions of draws at every level.
__m256 log_ps(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 invalid = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LE_OS);
  x = _mm256_max_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(0x00800000)));  // min normal
  __m256i imm0 = _mm256_srli_epi32(_mm256_castps_si256(x), 23);
  x = _mm256_and_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(~0x7f800000)));
  x = _mm256_or_ps(x, _mm256_set1_ps(0.5f));
  imm0 = _mm256_sub_epi32(imm0, _mm256_set1_epi32(0x7f));
  __m256 e = _mm256_cvtepi32_ps(imm0);
  e = _mm256_add_ps(e, one);
  const __m256 mask =
      _mm256_cmp_ps(x, _mm256_set1_ps(static_cast<float>(0.707106781186547524)), _CMP_LT_OS);
  const __m256 tmp = _mm256_and_ps(x, mask);
  x = _mm256_sub_ps(x, one);
  e = _mm256_sub_ps(e, _mm256_and_ps(one, mask));
  x = _mm256_add_ps(x, tmp);
  const __m256 z = _mm256_mul_ps(x, x);
  __m256 y = _mm256_fmadd_ps(_mm256_set1_ps(static_cast<float>(7.0376836292E-2)), x,
                             _mm256_set1_ps(static_cast<float>(-1.1514610310E-1)));
  for (const double p : {1.1676998740E-1, -1.2420140846E-1, +1.4249322787E-1, -1.6668057665E-1,
                         +2.0000714765E-1, -2.4999993993E-1, +3.3333331174E-1})
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(static_cast<float>(p)));
  y = _mm256_mul_ps(y, x);
  y = _mm256_fmadd_ps(y, z, _mm256_mul_ps(e, _mm256_set1_ps(static_cast<float>(-2.12194440e-4))));
  y = _mm256_fnmadd_ps(z, _mm256_set1_ps(0.5f), y);
  x = _mm256_fmadd_ps(e, _mm256_set1_ps(static_cast<float>(0.693359375)), _mm256_add_ps(x, y));
  return _mm256_blendv_ps(x, _mm256_set1_ps(std::numeric_limits<float>::quiet_NaN()), invalid);
}

void sincos_ps(__m256 x, __m256* s, __m256* c) {
  const __m256i sign_mask = _mm256_set1_epi32(static_cast<int>(0x80000000U));
  __m256i sign_bit_sin = _mm256_and_si256(_mm256_castps_si256(x), sign_mask);
  x = _mm256_castsi256_ps(_mm256_andnot_si256(sign_mask, _mm256_castps_si256(x)));    // |x|
  __m256 y = _mm256_mul_ps(x, _mm256_set1_ps(static_cast<float>(1.27323954473516)));  // 4/pi
  __m256i imm2 = _mm256_cvttps_epi32(y);
  imm2 = _mm256_add_epi32(imm2, _mm256_set1_epi32(1));
  imm2 = _mm256_and_si256(imm2, _mm256_set1_epi32(~1));
  y = _mm256_cvtepi32_ps(imm2);
  const __m256i imm4 = _mm256_sub_epi32(imm2, _mm256_set1_epi32(2));
  const __m256i swap_sign_bit_sin =
      _mm256_slli_epi32(_mm256_and_si256(imm2, _mm256_set1_epi32(4)), 29);
  const __m256 poly_mask = _mm256_castsi256_ps(
      _mm256_cmpeq_epi32(_mm256_and_si256(imm2, _mm256_set1_epi32(2)), _mm256_setzero_si256()));
  x = _mm256_fmadd_ps(y, _mm256_set1_ps(static_cast<float>(-0.78515625)), x);
  x = _mm256_fmadd_ps(y, _mm256_set1_ps(static_cast<float>(-2.4187564849853515625e-4)), x);
  x = _mm256_fmadd_ps(y, _mm256_set1_ps(static_cast<float>(-3.77489497744594108e-8)), x);
  const __m256i sign_bit_cos =
      _mm256_slli_epi32(_mm256_andnot_si256(imm4, _mm256_set1_epi32(4)), 29);
  sign_bit_sin = _mm256_xor_si256(sign_bit_sin, swap_sign_bit_sin);
  const __m256 z = _mm256_mul_ps(x, x);
  __m256 yc = _mm256_fmadd_ps(_mm256_set1_ps(static_cast<float>(2.443315711809948E-005)), z,
                              _mm256_set1_ps(static_cast<float>(-1.388731625493765E-003)));
  yc = _mm256_fmadd_ps(yc, z, _mm256_set1_ps(static_cast<float>(4.166664568298827E-002)));
  yc = _mm256_mul_ps(yc, z);
  yc = _mm256_fmsub_ps(yc, z, _mm256_mul_ps(z, _mm256_set1_ps(0.5f)));
  yc = _mm256_add_ps(yc, _mm256_set1_ps(1.0f));
  __m256 ys = _mm256_fmadd_ps(_mm256_set1_ps(static_cast<float>(-1.9515295891E-4)), z,
                              _mm256_set1_ps(static_cast<float>(8.3321608736E-3)));
  ys = _mm256_fmadd_ps(ys, z, _mm256_set1_ps(static_cast<float>(-1.6666654611E-1)));
  ys = _mm256_mul_ps(ys, z);
  ys = _mm256_fmadd_ps(ys, x, x);
  const __m256 ysin2 = _mm256_and_ps(poly_mask, ys);
  const __m256 ysin1 = _mm256_andnot_ps(poly_mask, yc);
  ys = _mm256_sub_ps(ys, ysin2);
  yc = _mm256_sub_ps(yc, ysin1);
  const __m256 xmm1 = _mm256_add_ps(ysin1, ysin2);
  const __m256 xmm2 = _mm256_add_ps(yc, ys);
  *s = _mm256_xor_ps(xmm1, _mm256_castsi256_ps(sign_bit_sin));
  *c = _mm256_xor_ps(xmm2, _mm256_castsi256_ps(sign_bit_cos));
}

void normal_block16_avx2(float* data, float mean, float std) {
  const __m256 u1 = _mm256_sub_ps(_mm256_set1_ps(1.0f), _mm256_loadu_ps(data));
  const __m256 u2 = _mm256_loadu_ps(data + 8);
  const __m256 radius = _mm256_sqrt_ps(_mm256_mul_ps(_mm256_set1_ps(-2.0f), log_ps(u1)));
  const __m256 theta =
      _mm256_mul_ps(_mm256_set1_ps(static_cast<float>(2.0f * std::numbers::pi)), u2);
  __m256 sintheta, costheta;
  sincos_ps(theta, &sintheta, &costheta);
  const __m256 n1 = _mm256_mul_ps(radius, costheta);
  const __m256 n2 = _mm256_mul_ps(radius, sintheta);
  const __m256 m = _mm256_set1_ps(mean);
  const __m256 sd = _mm256_set1_ps(std);
  _mm256_storeu_ps(data, _mm256_fmadd_ps(n1, sd, m));
  _mm256_storeu_ps(data + 8, _mm256_fmadd_ps(n2, sd, m));
}
constexpr rng::NormalBlock16 kNormalBlock = normal_block16_avx2;
#else
constexpr rng::NormalBlock16 kNormalBlock = nullptr;  // the portable block
#endif

void normal_kernel(Tensor& t, double mean, double std, rng::Generator* gen) {
  rng::CpuGenerator& g = cpu_gen("normal_", gen);
  if (t.dtype() == ScalarType::Float64) {
    fill_via<double>(t, ScalarType::Float64, [&](double* p, std::int64_t n) {
      rng::normal_fill(g, p, n, mean, std, true);
    });
  } else {
    // float32 follows PyTorch bit for bit; 16-bit floats are drawn in float32 and rounded.
    fill_via<float>(t, ScalarType::Float32, [&](float* p, std::int64_t n) {
      rng::normal_fill(g, p, n, mean, std, true, kNormalBlock);
    });
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
