// CPU sampling primitives on raw buffers, reproducing PyTorch 1.13's CPU kernels bit for bit
// (uniform_, normal_, bernoulli_(p), randperm) on a CpuGenerator.
#pragma once

#include <cstdint>

#include "engine/rng/cpu_generator.h"

namespace tb::rng {

// ---- Single draws. The caller must hold gen.mutex() (use these inside your own locked loop). ----
namespace unlocked {

/// at::uniform_real_distribution<float>(from, to): one 32-bit draw, 24 random bits; like PyTorch's
/// CPU kernel the affine map runs in double: float(((bits & (2^24-1)) * 2^-24) * (to - from) +
/// from).
float uniform_float(CpuGenerator& gen, float from = 0.0f, float to = 1.0f);

/// at::uniform_real_distribution<double>(from, to): random64(), 53 random bits, in double.
double uniform_double(CpuGenerator& gen, double from = 0.0, double to = 1.0);

/// at::normal_distribution<double>(mean, std): returns the cached double normal sample when
/// there is one; otherwise u1, u2 = two uniform doubles, r = sqrt(-2 log(1 - u2)),
/// theta = 2 pi u1, caches r sin(theta) and uses r cos(theta). Result = value * std + mean.
double normal_double(CpuGenerator& gen, double mean = 0.0, double std = 1.0);

}  // namespace unlocked

// ---- Whole fills. Each locks gen.mutex() for the entire fill. ----

/// torch.Tensor.uniform_(from, to) for float32 (PyTorch's serial uniform kernel, element order):
/// from/to are first rounded to float, then each element is unlocked::uniform_float().
void uniform_fill(CpuGenerator& gen, float* out, std::int64_t n, double from = 0.0,
                  double to = 1.0);

/// uniform_ for float64: each element is unlocked::uniform_double(from, to).
void uniform_fill(CpuGenerator& gen, double* out, std::int64_t n, double from = 0.0,
                  double to = 1.0);

/// uniform_ for float16 (digits = 11) and bfloat16 (digits = 8): one 32-bit draw per element,
/// x = (bits & (2^digits - 1)) * 2^-digits. Like PyTorch, from/to are rounded to the target type
/// and (to - from) is rounded to it again, then x * range + from is computed in float. Writes
/// floats; the caller converts them to half/bfloat16 (round to nearest even). Throws
/// tb::ValueError unless digits is 11 or 8.
void uniform_fill_digits(CpuGenerator& gen, float* out, std::int64_t n, double from, double to,
                         int digits);

/// torch.Tensor.normal_(mean, std) for float32 (PyTorch 1.13 normal_kernel). For contiguous
/// output with n >= 16: fill with uniform floats, then Box–Muller in blocks of 16 (u1 = 1 - d[j],
/// u2 = d[j+8]; d[j] = r cos, d[j+8] = r sin); if n % 16 != 0, the last 16 uniforms are redrawn
/// and the last block redone. The block uses a scalar port of PyTorch's AVX2 kernel
/// (avx_mathfun.h log256_ps/sincos256_ps, as compiled with FMA contraction), which is what
/// x86-64 PyTorch runs. Otherwise (n < 16 or !contiguous; out is then the n elements in
/// iteration order): each element is (float)unlocked::normal_double(mean, std).
/// `block`, when given, replaces the portable block with one that computes the same bits (the CPU
/// backend passes its AVX2 + FMA version, PyTorch's own kernel, at the levels that have it).
using NormalBlock16 = void (*)(float* data, float mean, float std);
void normal_fill(CpuGenerator& gen, float* out, std::int64_t n, double mean = 0.0, double std = 1.0,
                 bool contiguous = true, NormalBlock16 block = nullptr);

/// The portable 16-float block of normal_fill: d[j], d[j + 8] (j < 8) become the Box-Muller pair
/// of u1 = 1 - d[j], u2 = d[j + 8], times std plus mean, as PyTorch's normal_fill_16_AVX2.
void normal_block16(float* data, float mean, float std);

/// normal_ for float64: contiguous n >= 16 uses the same 16-block Box–Muller with std::log /
/// std::cos / std::sin in double on 53-bit uniforms; otherwise unlocked::normal_double per
/// element.
void normal_fill(CpuGenerator& gen, double* out, std::int64_t n, double mean = 0.0,
                 double std = 1.0, bool contiguous = true);

/// One at::normal_distribution<double> sample (uses and refills the cached normal). Locks.
double normal_double(CpuGenerator& gen, double mean = 0.0, double std = 1.0);

/// torch.Tensor.bernoulli_(p) with a scalar p, PyTorch's non-MKL CPU path
/// (at::bernoulli_distribution<double>): out[i] = (uniform double from random64() < p) ? 1 : 0.
/// Throws tb::ValueError unless 0 <= p <= 1. (Official MKL builds on Intel CPUs use an MKL
/// stream seeded from one random() draw instead; that is not reproduced.)
void bernoulli_fill(CpuGenerator& gen, float* out, std::int64_t n, double p);

/// torch.bernoulli(p_tensor) with float32 probabilities (at::bernoulli_distribution<float>):
/// out[i] = (uniform float (24-bit) < p[i]) ? 1 : 0. Throws tb::ValueError for a p[i] outside
/// [0, 1] (before drawing anything).
void bernoulli_fill(CpuGenerator& gen, float* out, const float* p, std::int64_t n);

/// torch.randperm(n) on CPU (PyTorch 1.13): out = 0..n-1, then for i in [0, n-2]:
/// z = random() % (n - i); swap(out[i], out[i + z]). Throws tb::ValueError for n < 0.
void randperm(CpuGenerator& gen, std::int64_t* out, std::int64_t n);

}  // namespace tb::rng
