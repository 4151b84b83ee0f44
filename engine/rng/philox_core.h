// Philox4x32-10 counter-based RNG (Random123 / curand compatible, header-only, host and CUDA
// device code, C++17 so that nvcc compiles it). PhiloxGenerator is in philox.h.
#pragma once

#include <cstdint>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define TB_HOST_DEVICE __host__ __device__
#else
#define TB_HOST_DEVICE
#endif

namespace tb::rng {

/// Four 32-bit words: a Philox counter or output block.
struct Philox4 {
  std::uint32_t x, y, z, w;
};

/// Two 32-bit words: a Philox key.
struct Philox2 {
  std::uint32_t x, y;
};

inline constexpr std::uint32_t kPhiloxM0 = 0xD2511F53U;  // multiplier of words 0/1
inline constexpr std::uint32_t kPhiloxM1 = 0xCD9E8D57U;  // multiplier of words 2/3
inline constexpr std::uint32_t kPhiloxW0 = 0x9E3779B9U;  // key bump (golden ratio)
inline constexpr std::uint32_t kPhiloxW1 = 0xBB67AE85U;  // key bump (sqrt(3) - 1)
inline constexpr int kPhiloxRounds = 10;

namespace philox_detail {
TB_HOST_DEVICE inline std::uint32_t mulhilo(std::uint32_t a, std::uint32_t b, std::uint32_t* hi) {
  const std::uint64_t p = static_cast<std::uint64_t>(a) * b;
  *hi = static_cast<std::uint32_t>(p >> 32);
  return static_cast<std::uint32_t>(p);
}

TB_HOST_DEVICE inline Philox4 round(Philox4 c, Philox2 k) {
  std::uint32_t hi0, hi1;
  const std::uint32_t lo0 = mulhilo(kPhiloxM0, c.x, &hi0);
  const std::uint32_t lo1 = mulhilo(kPhiloxM1, c.z, &hi1);
  return Philox4{hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0};
}
}  // namespace philox_detail

/// Philox4x32-10 block function: the 4 output words for a 128-bit counter (x = lowest word) and
/// a 64-bit key (x = low word). Matches Random123's philox4x32_10 and curand_Philox4x32_10.
TB_HOST_DEVICE inline Philox4 philox4x32_10(Philox4 counter, Philox2 key) {
  for (int i = 0; i < kPhiloxRounds - 1; ++i) {
    counter = philox_detail::round(counter, key);
    key.x += kPhiloxW0;
    key.y += kPhiloxW1;
  }
  return philox_detail::round(counter, key);
}

/// Streaming Philox state laid out like curandStatePhilox4_32_10_t: the same (seed, subsequence,
/// offset) gives the same numbers as curand_init + curand()/curand4().
struct PhiloxState {
  Philox4 counter{0, 0, 0, 0};
  Philox2 key{0, 0};
  Philox4 output{0, 0, 0, 0};
  std::uint32_t index = 0;  // next word of `output` to return (0..3)

  /// curand_init(seed, subsequence, offset, &state): key = seed, counter words z/w =
  /// subsequence, then skip `offset` 32-bit draws.
  TB_HOST_DEVICE static PhiloxState init(std::uint64_t seed, std::uint64_t subsequence,
                                         std::uint64_t offset) {
    PhiloxState s;
    s.key = Philox2{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)};
    s.incr_hi(subsequence);
    s.output = philox4x32_10(s.counter, s.key);
    s.skip(offset);
    return s;
  }

  /// curand skipahead(n): advance by n 32-bit draws.
  TB_HOST_DEVICE void skip(std::uint64_t n) {
    index += static_cast<std::uint32_t>(n & 3U);
    n /= 4;
    if (index > 3) {
      n += 1;
      index -= 4;
    }
    incr(n);
    output = philox4x32_10(counter, key);
  }

  /// curand(): the next 32-bit draw.
  TB_HOST_DEVICE std::uint32_t next() {
    std::uint32_t ret;
    switch (index++) {
      case 1:
        ret = output.y;
        break;
      case 2:
        ret = output.z;
        break;
      case 3:
        ret = output.w;
        break;
      default:
        ret = output.x;
        break;
    }
    if (index == 4) {
      incr1();
      output = philox4x32_10(counter, key);
      index = 0;
    }
    return ret;
  }

  /// curand4(): the next four 32-bit draws.
  TB_HOST_DEVICE Philox4 next4() {
    const Philox4 tmp = output;
    incr1();
    output = philox4x32_10(counter, key);
    switch (index) {
      case 1:
        return Philox4{tmp.y, tmp.z, tmp.w, output.x};
      case 2:
        return Philox4{tmp.z, tmp.w, output.x, output.y};
      case 3:
        return Philox4{tmp.w, output.x, output.y, output.z};
      default:
        return tmp;
    }
  }

 private:
  TB_HOST_DEVICE void incr1() {
    if (++counter.x) return;
    if (++counter.y) return;
    if (++counter.z) return;
    ++counter.w;
  }
  // 128-bit counter += n (curand's Philox_State_Incr, including its carry logic).
  TB_HOST_DEVICE void incr(std::uint64_t n) {
    const auto nlo = static_cast<std::uint32_t>(n);
    auto nhi = static_cast<std::uint32_t>(n >> 32);
    counter.x += nlo;
    if (counter.x < nlo) ++nhi;
    counter.y += nhi;
    if (nhi <= counter.y) return;
    if (++counter.z) return;
    ++counter.w;
  }
  // Upper 64 bits of the counter += n (curand's Philox_State_Incr_hi).
  TB_HOST_DEVICE void incr_hi(std::uint64_t n) {
    const auto nlo = static_cast<std::uint32_t>(n);
    auto nhi = static_cast<std::uint32_t>(n >> 32);
    counter.z += nlo;
    if (counter.z < nlo) ++nhi;
    counter.w += nhi;
  }
};

/// 2^-32 as a float (curand's CURAND_2POW32_INV).
inline constexpr float kTwoPowMinus32 = 2.3283064e-10f;

/// curand_uniform's transform: x * 2^-32 + 2^-33 in float (the product is exact, so FMA
/// contraction on the device cannot change the result). The result is in (0, 1] — note that
/// 1.0f IS reachable (large x round up) and 0 is not. PyTorch's CUDA uniform_ then maps 1 to 0
/// (see uniform_from_curand()).
TB_HOST_DEVICE inline float curand_uniform_from_bits(std::uint32_t x) {
  return static_cast<float>(x) * kTwoPowMinus32 + (kTwoPowMinus32 / 2.0f);
}

/// PyTorch's CUDA uniform_ transform of a curand_uniform value u: u == 1 becomes 0, then
/// u * (to - from) + from, so the result lies in [from, to).
TB_HOST_DEVICE inline float uniform_from_curand(float u, float from, float to) {
  const float r = (u == 1.0f) ? 0.0f : u;
  return r * (to - from) + from;
}

/// curand_uniform_double's transform of two draws (curand's _curand_uniform_double_hq): 53 bits
/// z = x ^ (y << 21), z * 2^-53 + 2^-54, in (0, 1].
TB_HOST_DEVICE inline double curand_uniform_double_from_bits(std::uint32_t x, std::uint32_t y) {
  constexpr double kTwoPowMinus53 = 1.1102230246251565e-16;
  const std::uint64_t z =
      static_cast<std::uint64_t>(x) ^ (static_cast<std::uint64_t>(y) << (53 - 32));
  return static_cast<double>(z) * kTwoPowMinus53 + (kTwoPowMinus53 / 2.0);
}

}  // namespace tb::rng
