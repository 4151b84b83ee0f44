// CPU sampling primitives: PyTorch 1.13 CPU uniform/normal/bernoulli/randperm algorithms.
#include "engine/rng/cpu_sampling.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <mutex>
#include <numbers>
#include <numeric>
#include <utility>

#include "engine/core/error.h"

namespace tb::rng {

namespace unlocked {

float uniform_float(CpuGenerator& gen, float from, float to) {
  // PyTorch's CPU dist_acctype<float> is double: x * (to - from) + from is evaluated in double
  // (from/to already rounded to float) and rounded once. With from=0, to=1 that equals the float
  // computation; with other bounds (e.g. nn.Linear's init) float arithmetic differs in the last
  // bit.
  constexpr std::uint32_t kMask = (1U << 24) - 1;
  constexpr double kDivisor = 1.0 / static_cast<double>(1U << 24);
  const double x = static_cast<double>(gen.random() & kMask) * kDivisor;
  return static_cast<float>(x * (static_cast<double>(to) - static_cast<double>(from)) +
                            static_cast<double>(from));
}

double uniform_double(CpuGenerator& gen, double from, double to) {
  constexpr std::uint64_t kMask = (std::uint64_t{1} << 53) - 1;
  constexpr double kDivisor = 1.0 / static_cast<double>(std::uint64_t{1} << 53);
  const double x = static_cast<double>(gen.random64() & kMask) * kDivisor;
  return x * (to - from) + from;
}

double normal_double(CpuGenerator& gen, double mean, double std) {
  if (const auto cached = gen.next_double_normal_sample()) {
    gen.set_next_double_normal_sample(std::nullopt);
    return *cached * std + mean;
  }
  const double u1 = uniform_double(gen);
  const double u2 = uniform_double(gen);
  const double r = std::sqrt(-2.0 * std::log(1.0 - u2));
  const double theta = 2.0 * std::numbers::pi * u1;
  gen.set_next_double_normal_sample(r * std::sin(theta));
  return r * std::cos(theta) * std + mean;
}

}  // namespace unlocked

namespace {

// ---- Scalar port of avx_mathfun.h (log256_ps, sincos256_ps) for one lane. ----
// Assumption: PyTorch's x86-64 builds compile this AVX2 kernel with GCC, -mfma and its default
// -ffp-contract=fast, so every _mm256_mul_ps whose only use is an _mm256_add_ps/_mm256_sub_ps
// becomes one FMA; madd() reproduces those fused operations explicitly (std::fma), everything else
// is rounded per step. (The vectors in tests/data/rng_cpu.json match this port; they match an
// unfused port too, the two differ in ~1% of samples by an ulp.)
inline float madd(float a, float b, float c) {
  return std::fma(a, b, c);
}

inline float bits_to_float(std::uint32_t b) {
  return std::bit_cast<float>(b);
}
inline std::uint32_t float_to_bits(float f) {
  return std::bit_cast<std::uint32_t>(f);
}

float cephes_logf(float x) {
  constexpr float kSqrtHf = static_cast<float>(0.707106781186547524);
  constexpr float kP0 = static_cast<float>(7.0376836292E-2);
  constexpr float kP1 = static_cast<float>(-1.1514610310E-1);
  constexpr float kP2 = static_cast<float>(1.1676998740E-1);
  constexpr float kP3 = static_cast<float>(-1.2420140846E-1);
  constexpr float kP4 = static_cast<float>(+1.4249322787E-1);
  constexpr float kP5 = static_cast<float>(-1.6668057665E-1);
  constexpr float kP6 = static_cast<float>(+2.0000714765E-1);
  constexpr float kP7 = static_cast<float>(-2.4999993993E-1);
  constexpr float kP8 = static_cast<float>(+3.3333331174E-1);
  constexpr float kQ1 = static_cast<float>(-2.12194440e-4);
  constexpr float kQ2 = static_cast<float>(0.693359375);
  const bool invalid = x <= 0.0f;
  const float min_norm = bits_to_float(0x00800000U);
  x = x > min_norm ? x : min_norm;  // _mm256_max_ps(x, min_norm_pos)
  std::int32_t imm0 = static_cast<std::int32_t>(float_to_bits(x) >> 23);
  x = bits_to_float((float_to_bits(x) & ~0x7f800000U) | float_to_bits(0.5f));
  imm0 -= 0x7f;
  float e = static_cast<float>(imm0);
  e = e + 1.0f;
  const bool mask = x < kSqrtHf;
  const float tmp0 = mask ? x : 0.0f;
  x = x - 1.0f;
  e = e - (mask ? 1.0f : 0.0f);
  x = x + tmp0;
  const float z = x * x;
  float y = madd(kP0, x, kP1);
  y = madd(y, x, kP2);
  y = madd(y, x, kP3);
  y = madd(y, x, kP4);
  y = madd(y, x, kP5);
  y = madd(y, x, kP6);
  y = madd(y, x, kP7);
  y = madd(y, x, kP8);
  y = y * x;
  y = madd(y, z, e * kQ1);  // y*z + e*q1 (GCC fuses the first product)
  y = madd(-z, 0.5f, y);    // y - z*0.5
  x = madd(e, kQ2, x + y);  // (x + y) + e*q2
  return invalid ? std::numeric_limits<float>::quiet_NaN() : x;
}

void cephes_sincosf(float x, float* s, float* c) {
  constexpr float kDp1 = static_cast<float>(-0.78515625);
  constexpr float kDp2 = static_cast<float>(-2.4187564849853515625e-4);
  constexpr float kDp3 = static_cast<float>(-3.77489497744594108e-8);
  constexpr float kSinP0 = static_cast<float>(-1.9515295891E-4);
  constexpr float kSinP1 = static_cast<float>(8.3321608736E-3);
  constexpr float kSinP2 = static_cast<float>(-1.6666654611E-1);
  constexpr float kCosP0 = static_cast<float>(2.443315711809948E-005);
  constexpr float kCosP1 = static_cast<float>(-1.388731625493765E-003);
  constexpr float kCosP2 = static_cast<float>(4.166664568298827E-002);
  constexpr float kFopi = static_cast<float>(1.27323954473516);
  std::uint32_t sign_bit_sin = float_to_bits(x) & 0x80000000U;
  x = std::fabs(x);
  float y = x * kFopi;
  std::int32_t imm2 = static_cast<std::int32_t>(y);  // cvttps: truncation
  imm2 = (imm2 + 1) & ~1;
  y = static_cast<float>(imm2);
  std::int32_t imm4 = imm2;
  const std::uint32_t swap_sign_bit_sin = static_cast<std::uint32_t>(imm2 & 4) << 29;
  const bool poly_mask = (imm2 & 2) == 0;
  x = madd(y, kDp1, x);
  x = madd(y, kDp2, x);
  x = madd(y, kDp3, x);
  imm4 -= 2;
  const std::uint32_t sign_bit_cos = static_cast<std::uint32_t>(~imm4 & 4) << 29;
  sign_bit_sin ^= swap_sign_bit_sin;
  const float z = x * x;
  float yc = madd(kCosP0, z, kCosP1);
  yc = madd(yc, z, kCosP2);
  yc = yc * z;
  yc = madd(yc, z, -(z * 0.5f));  // y*z - z*0.5
  yc = yc + 1.0f;
  float ys = madd(kSinP0, z, kSinP1);
  ys = madd(ys, z, kSinP2);
  ys = ys * z;
  ys = madd(ys, x, x);
  const float ysin2 = poly_mask ? ys : 0.0f;
  const float ysin1 = poly_mask ? 0.0f : yc;
  ys = ys - ysin2;
  yc = yc - ysin1;
  const float xmm1 = ysin1 + ysin2;
  const float xmm2 = yc + ys;
  *s = bits_to_float(float_to_bits(xmm1) ^ sign_bit_sin);
  *c = bits_to_float(float_to_bits(xmm2) ^ sign_bit_cos);
}

// normal_fill_16_AVX2, one lane pair at a time.
void normal_fill_16_avx2_port(float* data, float mean, float std) {
  const auto two_pi = static_cast<float>(2.0f * std::numbers::pi);
  for (int j = 0; j < 8; ++j) {
    const float u1 = 1.0f - data[j];
    const float u2 = data[j + 8];
    const float radius = std::sqrt(-2.0f * cephes_logf(u1));
    const float theta = two_pi * u2;
    float sintheta, costheta;
    cephes_sincosf(theta, &sintheta, &costheta);
    const float n1 = radius * costheta;
    const float n2 = radius * sintheta;
    data[j] = std::fma(n1, std, mean);  // _mm256_fmadd_ps
    data[j + 8] = std::fma(n2, std, mean);
  }
}

// The generic normal_fill_16<scalar_t> (PyTorch uses it for double; float uses the AVX2 port).
template <typename T>
void normal_fill_16_scalar(T* data, T mean, T std) {
  for (int j = 0; j < 8; ++j) {
    const T u1 = 1 - data[j];  // [0, 1) -> (0, 1] for log.
    const T u2 = data[j + 8];
    const T radius = std::sqrt(-2 * std::log(u1));
    const T theta = static_cast<T>(2.0f * std::numbers::pi * u2);
    data[j] = radius * std::cos(theta) * std + mean;
    data[j + 8] = radius * std::sin(theta) * std + mean;
  }
}

// n × unlocked::uniform_float(gen, from, to), the generator's outputs drawn a block at a time.
void uniform_floats(CpuGenerator& gen, float* out, std::int64_t n, float from, float to) {
  constexpr std::uint32_t kMask = (1U << 24) - 1;
  constexpr double kDivisor = 1.0 / static_cast<double>(1U << 24);
  const double range = static_cast<double>(to) - static_cast<double>(from);
  const auto base = static_cast<double>(from);
  std::uint32_t bits[512];
  while (n > 0) {
    const auto k = static_cast<std::size_t>(std::min<std::int64_t>(n, 512));
    gen.random_fill(bits, k);
    for (std::size_t i = 0; i < k; ++i)
      out[i] = static_cast<float>(static_cast<double>(bits[i] & kMask) * kDivisor * range + base);
    out += k;
    n -= static_cast<std::int64_t>(k);
  }
}

template <typename T, typename Block>
void normal_fill_blocks(CpuGenerator& gen, T* data, std::int64_t size, Block block) {
  if constexpr (std::is_same_v<T, float>) {
    uniform_floats(gen, data, size, 0.0f, 1.0f);
  } else {
    for (std::int64_t i = 0; i < size; ++i)
      data[i] = unlocked::uniform_double(gen);
  }
  for (std::int64_t i = 0; i < size - 15; i += 16)
    block(data + i);
  if (size % 16 != 0) {
    // Recompute the last 16 values.
    T* tail = data + size - 16;
    for (int i = 0; i < 16; ++i) {
      if constexpr (std::is_same_v<T, float>) {
        tail[i] = unlocked::uniform_float(gen);
      } else {
        tail[i] = unlocked::uniform_double(gen);
      }
    }
    block(tail);
  }
}

void check_count(std::int64_t n, const char* op) {
  TB_CHECK(n >= 0, "[", op, "] element count must be >= 0, got ", n);
}

}  // namespace

void uniform_fill(CpuGenerator& gen, float* out, std::int64_t n, double from, double to) {
  check_count(n, "uniform_");
  std::lock_guard<std::mutex> lock(gen.mutex());
  uniform_floats(gen, out, n, static_cast<float>(from), static_cast<float>(to));
}

void uniform_fill(CpuGenerator& gen, double* out, std::int64_t n, double from, double to) {
  check_count(n, "uniform_");
  std::lock_guard<std::mutex> lock(gen.mutex());
  for (std::int64_t i = 0; i < n; ++i)
    out[i] = unlocked::uniform_double(gen, from, to);
}

namespace {
// Rounds a float to the nearest value with `digits` significant bits and the exponent range of
// float16 (digits 11) or bfloat16 (digits 8), ties to even.
float round_to_reduced(float v, int digits) {
  if (!std::isfinite(v) || v == 0.0f) return v;
  if (digits == 8) {  // bfloat16: c10's round_to_nearest_even
    std::uint32_t u = float_to_bits(v);
    u += ((u >> 16) & 1U) + 0x7FFFU;
    return bits_to_float(u & 0xFFFF0000U);
  }
  // float16: subnormals are multiples of 2^-24, overflow above 65504 (round to inf at 65520).
  const double d = v;
  if (std::fabs(d) >= 65520.0) return std::copysign(std::numeric_limits<float>::infinity(), v);
  const int e = std::max(std::ilogb(d), -14);
  const double q = std::ldexp(1.0, e - 10);
  return static_cast<float>(std::nearbyint(d / q) * q);
}
}  // namespace

void uniform_fill_digits(CpuGenerator& gen, float* out, std::int64_t n, double from, double to,
                         int digits) {
  check_count(n, "uniform_");
  TB_CHECK(digits == 11 || digits == 8,
           "[uniform_] digits must be 11 (float16) or 8 (bfloat16), got ", digits);
  const float f = round_to_reduced(static_cast<float>(from), digits);
  const float t = round_to_reduced(static_cast<float>(to), digits);
  const float range = round_to_reduced(t - f, digits);  // Half - Half returns Half in c10
  const std::uint32_t mask = (1U << digits) - 1;
  const float divisor = 1.0f / static_cast<float>(1U << digits);
  std::lock_guard<std::mutex> lock(gen.mutex());
  for (std::int64_t i = 0; i < n; ++i) {
    const float x = static_cast<float>(gen.random() & mask) * divisor;
    out[i] = x * range + f;
  }
}

void normal_block16(float* data, float mean, float std) {
  normal_fill_16_avx2_port(data, mean, std);
}

void normal_fill(CpuGenerator& gen, float* out, std::int64_t n, double mean, double std,
                 bool contiguous, NormalBlock16 block) {
  check_count(n, "normal_");
  std::lock_guard<std::mutex> lock(gen.mutex());
  if (n >= 16 && contiguous) {
    const auto m = static_cast<float>(mean);
    const auto s = static_cast<float>(std);
    if (block == nullptr) block = normal_fill_16_avx2_port;
    normal_fill_blocks(gen, out, n, [&](float* d) { block(d, m, s); });
    return;
  }
  for (std::int64_t i = 0; i < n; ++i) {
    out[i] = static_cast<float>(unlocked::normal_double(gen, mean, std));
  }
}

void normal_fill(CpuGenerator& gen, double* out, std::int64_t n, double mean, double std,
                 bool contiguous) {
  check_count(n, "normal_");
  std::lock_guard<std::mutex> lock(gen.mutex());
  if (n >= 16 && contiguous) {
    normal_fill_blocks(gen, out, n,
                       [&](double* d) { normal_fill_16_scalar<double>(d, mean, std); });
    return;
  }
  for (std::int64_t i = 0; i < n; ++i)
    out[i] = unlocked::normal_double(gen, mean, std);
}

double normal_double(CpuGenerator& gen, double mean, double std) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  return unlocked::normal_double(gen, mean, std);
}

void bernoulli_fill(CpuGenerator& gen, float* out, std::int64_t n, double p) {
  check_count(n, "bernoulli_");
  TB_CHECK(p >= 0.0 && p <= 1.0, "[bernoulli_] p must be in [0, 1], got ", p);
  std::lock_guard<std::mutex> lock(gen.mutex());
  for (std::int64_t i = 0; i < n; ++i)
    out[i] = unlocked::uniform_double(gen) < p ? 1.0f : 0.0f;
}

void bernoulli_fill(CpuGenerator& gen, float* out, const float* p, std::int64_t n) {
  check_count(n, "bernoulli");
  for (std::int64_t i = 0; i < n; ++i) {
    TB_CHECK(p[i] >= 0.0f && p[i] <= 1.0f, "[bernoulli] probability p[", i,
             "] must be in [0, 1], got ", p[i]);
  }
  std::lock_guard<std::mutex> lock(gen.mutex());
  for (std::int64_t i = 0; i < n; ++i)
    out[i] = unlocked::uniform_float(gen) < p[i] ? 1.0f : 0.0f;
}

void randperm(CpuGenerator& gen, std::int64_t* out, std::int64_t n) {
  TB_CHECK(n >= 0, "[randperm] n must be non-negative, got ", n);
  std::iota(out, out + n, std::int64_t{0});
  std::lock_guard<std::mutex> lock(gen.mutex());
  for (std::int64_t i = 0; i < n - 1; ++i) {
    const auto z = static_cast<std::int64_t>(gen.random() % static_cast<std::uint64_t>(n - i));
    std::swap(out[i], out[z + i]);
  }
}

}  // namespace tb::rng
