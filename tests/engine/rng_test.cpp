// Tests of engine/rng: PyTorch-compatible MT19937 CPU generator, sampling primitives, seeding,
// default generators, Philox4x32-10 and PhiloxGenerator (at::CPUGeneratorImpl and
// at::CUDAGeneratorImpl of pytorch/pytorch aten/src/ATen/).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numbers>
#include <string>
#include <thread>
#include <vector>

#include "engine/core/error.h"
#include "engine/rng/cpu_generator.h"
#include "engine/rng/cpu_sampling.h"
#include "engine/rng/generator.h"
#include "engine/rng/philox.h"

namespace tb::rng {
namespace {

using core::Device;
using core::DeviceType;

// Returns the message of the tb::Error `fn` throws (fails the test when it does not throw).
template <typename Fn>
std::string error_message(Fn&& fn) {
  try {
    fn();
  } catch (const tb::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a tb::Error";
  return {};
}

std::uint64_t read_u64(const std::vector<std::uint8_t>& s, std::size_t off) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= static_cast<std::uint64_t>(s[off + i]) << (8 * i);
  return v;
}

void write_u64(std::vector<std::uint8_t>& s, std::size_t off, std::uint64_t v) {
  for (int i = 0; i < 8; ++i)
    s[off + i] = static_cast<std::uint8_t>(v >> (8 * i));
}

void write_f64(std::vector<std::uint8_t>& s, std::size_t off, double d) {
  std::uint64_t v;
  std::memcpy(&v, &d, 8);
  write_u64(s, off, v);
}

// ---------------------- known MT19937 outputs, torch.manual_seed(0); torch.rand(5)

TEST(CpuGenerator, FirstMersenneTwisterOutputs) {
  struct Case {
    std::uint64_t seed;
    std::uint32_t expected[3];
  };
  const Case cases[] = {{0, {2357136044U, 2546248239U, 3071714933U}},
                        {5489, {3499211612U, 581869302U, 3890346734U}},
                        {42, {1608637542U, 3421126067U, 4083286876U}}};
  for (const Case& c : cases) {
    CpuGenerator gen(c.seed);
    std::lock_guard<std::mutex> lock(gen.mutex());
    for (std::uint32_t e : c.expected)
      EXPECT_EQ(gen.random(), e) << "seed " << c.seed;
  }
}

TEST(CpuGenerator, RandFloat32MatchesSpec) {
  CpuGenerator gen;
  gen.manual_seed(0);
  float r[5];
  uniform_fill(gen, r, 5);
  const float expected0[] = {0.49625659f, 0.76822180f, 0.08847743f, 0.13203049f, 0.30742282f};
  for (int i = 0; i < 5; ++i)
    EXPECT_NEAR(r[i], expected0[i], 5e-9) << i;

  gen.manual_seed(42);
  uniform_fill(gen, r, 3);
  const float expected42[] = {0.88226926f, 0.91500396f, 0.38286376f};
  for (int i = 0; i < 3; ++i)
    EXPECT_NEAR(r[i], expected42[i], 5e-9) << i;
}

TEST(CpuGenerator, NegativeSeedIsReinterpreted) {
  EXPECT_EQ(seed_from_signed(-1), 18446744073709551615ULL);
  EXPECT_EQ(parse_seed("-1"), 18446744073709551615ULL);
  CpuGenerator gen;
  gen.manual_seed(seed_from_signed(-1));
  EXPECT_EQ(gen.initial_seed(), 18446744073709551615ULL);
}

TEST(CpuGenerator, OnlyLow32BitsOfSeedAffectTheStream) {
  CpuGenerator a(1);
  CpuGenerator b(4294967297ULL);
  EXPECT_EQ(a.initial_seed(), 1U);
  EXPECT_EQ(b.initial_seed(), 4294967297ULL);
  std::lock_guard<std::mutex> la(a.mutex());
  std::lock_guard<std::mutex> lb(b.mutex());
  for (int i = 0; i < 1000; ++i)
    ASSERT_EQ(a.random(), b.random()) << i;
}

// The block draw gives what the same number of single draws gives, across regenerations of the
// state (624 outputs each) and from any point in a block, and leaves the same state.
TEST(CpuGenerator, RandomFillEqualsSingleDraws) {
  for (const std::size_t skip : {std::size_t{0}, std::size_t{1}, std::size_t{623}, std::size_t{624},
                                 std::size_t{625}, std::size_t{1000}}) {
    CpuGenerator a(77);
    CpuGenerator b(77);
    for (const std::size_t n : {skip, std::size_t{0}, std::size_t{1}, std::size_t{5},
                                std::size_t{623}, std::size_t{624}, std::size_t{2000}}) {
      std::vector<std::uint32_t> got(n);
      {
        std::lock_guard<std::mutex> la(a.mutex());
        std::lock_guard<std::mutex> lb(b.mutex());
        a.random_fill(got.data(), n);
        for (std::size_t i = 0; i < n; ++i)
          ASSERT_EQ(got[i], b.random()) << "skip " << skip << ", n " << n << ", i " << i;
      }
      ASSERT_EQ(a.get_state(), b.get_state()) << "skip " << skip << ", n " << n;
    }
  }
}

// ------------------------------------------------------ PyTorch reference vectors

// tests/data/rng_cpu.json was produced by PyTorch 1.13 (Debian python3-torch, CPU). Per seed,
// the lists are drawn in order from one generator: rand(8) f32, rand(4) f64, randn(8) f32,
// randn(16) f32, randperm(10).
// All five streams are asserted BIT-EXACT, including randn(16) (PyTorch's AVX2 vectorised path,
// reproduced by a scalar port of avx_mathfun.h) and randn(8) (the scalar normal_distribution
// path).
TEST(CpuSampling, PyTorchReferenceVectorsBitExact) {
  std::ifstream file(std::string(TB_TEST_DATA_DIR) + "/rng_cpu.json");
  ASSERT_TRUE(file.good()) << "cannot open rng_cpu.json under " << TB_TEST_DATA_DIR;
  const nlohmann::json root = nlohmann::json::parse(file);
  ASSERT_EQ(root.at("seeds").size(), 5U);
  for (const auto& [key, d] : root.at("seeds").items()) {
    SCOPED_TRACE("seed " + key);
    CpuGenerator gen;
    gen.manual_seed(parse_seed(key));

    // Each stream is drawn in the file's order from the one generator, then compared exactly.
    auto expect_stream = [&](const char* name, auto fill, auto value_type) {
      using T = decltype(value_type);
      const auto& want = d.at(name);
      std::vector<T> got(want.size());
      fill(got.data(), static_cast<std::int64_t>(got.size()));
      for (std::size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i], want[i].template get<T>()) << name << "[" << i << "] seed " << key;
      }
    };
    expect_stream(
        "rand_f32_8", [&](float* p, std::int64_t n) { uniform_fill(gen, p, n); }, float{});
    expect_stream(
        "rand_f64_4", [&](double* p, std::int64_t n) { uniform_fill(gen, p, n); }, double{});
    expect_stream(
        "randn_f32_8", [&](float* p, std::int64_t n) { normal_fill(gen, p, n); }, float{});
    expect_stream(
        "randn_f32_16", [&](float* p, std::int64_t n) { normal_fill(gen, p, n); }, float{});

    std::int64_t perm[10];
    randperm(gen, perm, 10);
    for (int i = 0; i < 10; ++i)
      EXPECT_EQ(perm[i], d.at("randperm_10")[i].get<std::int64_t>()) << i;
  }
}

// ------------------------------------------------------------- state handling

TEST(CpuGenerator, StateLayout) {
  CpuGenerator gen(0x0102030405060708ULL);
  std::vector<std::uint8_t> s = gen.get_state();
  ASSERT_EQ(s.size(), 5056U);
  EXPECT_EQ(read_u64(s, 0), 0x0102030405060708ULL);  // the_initial_seed
  EXPECT_EQ(s[8], 1);                                // left = 1 after seeding
  EXPECT_EQ(s[12], 1);                               // seeded
  EXPECT_EQ(read_u64(s, 16), 0U);                    // next
  EXPECT_EQ(read_u64(s, 24), 0x05060708U);           // state[0] = low 32 bits of the seed
  EXPECT_EQ(s[5040], 0);                             // no cached double normal
  EXPECT_EQ(s[5052], 0);                             // no cached float normal

  normal_double(gen);  // leaves a cached double normal
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_next_float_normal_sample(1.5f);
  }
  s = gen.get_state();
  EXPECT_EQ(s[5040], 1);
  EXPECT_EQ(read_u64(s, 5016), 0U);  // normal_x dummy
  EXPECT_EQ(read_u64(s, 5032), 0U);  // normal_rho dummy
  EXPECT_EQ(s[5052], 1);
  float f;
  std::memcpy(&f, &s[5048], 4);
  EXPECT_EQ(f, 1.5f);
}

TEST(CpuGenerator, StateRoundTripIncludingCachedNormal) {
  CpuGenerator gen(1234);
  float warm[37];
  uniform_fill(gen, warm, 37);
  const double first = normal_double(gen);  // caches the sin half
  (void)first;
  const std::vector<std::uint8_t> saved = gen.get_state();
  std::vector<double> a(9);
  for (double& v : a)
    v = normal_double(gen);  // a[0] is the cached sample
  float fa[20];
  uniform_fill(gen, fa, 20);

  gen.manual_seed(99);  // scramble, then restore
  gen.set_state(saved);
  EXPECT_EQ(gen.get_state(), saved);
  for (double v : a)
    EXPECT_EQ(normal_double(gen), v);
  float fb[20];
  uniform_fill(gen, fb, 20);
  for (int i = 0; i < 20; ++i)
    EXPECT_EQ(fa[i], fb[i]);

  // A fresh generator restored from the state continues identically, and clone() too.
  CpuGenerator other(7);
  other.set_state(saved);
  auto copy = other.clone();
  EXPECT_EQ(copy->get_state(), saved);
  EXPECT_EQ(copy->device(), Device(DeviceType::CPU, 0));
  EXPECT_EQ(normal_double(other), a[0]);
}

TEST(CpuGenerator, ReseedClearsCachedNormal) {
  CpuGenerator gen(5);
  const double n0 = normal_double(gen);
  gen.manual_seed(5);
  EXPECT_EQ(normal_double(gen), n0);
  EXPECT_EQ(gen.get_state()[5040], 1);  // the new pair's sin half is cached
}

TEST(CpuGenerator, LegacyStateSizeRecomputesCachedNormal) {
  CpuGenerator gen(77);
  std::vector<std::uint8_t> legacy = gen.get_state();
  legacy.resize(5048);
  write_f64(legacy, 5016, 0.25);  // normal_x
  write_f64(legacy, 5032, 2.0);   // normal_rho
  legacy[5040] = 1;               // normal_is_valid
  CpuGenerator restored(1);
  restored.set_state(legacy);
  EXPECT_EQ(restored.initial_seed(), 77U);
  EXPECT_DOUBLE_EQ(normal_double(restored, 0.0, 1.0),
                   2.0 * std::sin(2.0 * std::numbers::pi * 0.25));
  // The MT stream itself is the seed-77 one.
  CpuGenerator ref(77);
  float a[4], b[4];
  uniform_fill(restored, a, 4);
  uniform_fill(ref, b, 4);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(a[i], b[i]);
}

TEST(CpuGenerator, WrongStateSizeError) {
  CpuGenerator gen(3);
  const std::vector<std::uint8_t> before = gen.get_state();
  const std::vector<std::uint8_t> bad(100, 0);
  const std::string msg = error_message([&] { gen.set_state(bad); });
  EXPECT_NE(msg.find("Expected either a CPUGeneratorImplStateLegacy of size 5048 or a "
                     "CPUGeneratorImplState of size 5056 but found the input RNG state size "
                     "to be 100"),
            std::string::npos)
      << msg;
  EXPECT_EQ(gen.get_state(), before);
}

TEST(CpuGenerator, InvalidMtStateError) {
  CpuGenerator gen(3);
  std::vector<std::uint8_t> s = gen.get_state();
  std::vector<std::uint8_t> bad = s;
  bad[8] = 0;  // left = 0
  EXPECT_NE(error_message([&] { gen.set_state(bad); }).find("Invalid mt19937 state"),
            std::string::npos);
  bad = s;
  bad[12] = 0;  // not seeded
  EXPECT_NE(error_message([&] { gen.set_state(bad); }).find("Invalid mt19937 state"),
            std::string::npos);
  bad = s;
  write_u64(bad, 16, 625);  // next past the end
  EXPECT_NE(error_message([&] { gen.set_state(bad); }).find("Invalid mt19937 state"),
            std::string::npos);
  EXPECT_EQ(gen.get_state(), s);
}

TEST(CpuGenerator, OffsetIsNotSupported) {
  CpuGenerator gen;
  EXPECT_NE(error_message([&] { gen.set_offset(4); }).find("CPU Generator does not use offset"),
            std::string::npos);
  EXPECT_NE(
      error_message([&] { (void)gen.get_offset(); }).find("CPU Generator does not use offset"),
      std::string::npos);
}

TEST(CpuGenerator, SeedIsNondeterministicAnd53Bit) {
  CpuGenerator gen;
  const std::uint64_t a = gen.seed();
  EXPECT_EQ(gen.initial_seed(), a);
  EXPECT_LT(a, std::uint64_t{1} << 53);
  const std::uint64_t b = gen.seed();
  const std::uint64_t c = gen.seed();
  EXPECT_FALSE(a == b && b == c);  // three equal 53-bit draws: practically impossible
}

// ------------------------------------------------------------------ seeds

TEST(Seed, ParseSeedRange) {
  EXPECT_EQ(parse_seed("0"), 0U);
  EXPECT_EQ(parse_seed("42"), 42U);
  EXPECT_EQ(parse_seed("+42"), 42U);
  EXPECT_EQ(parse_seed("18446744073709551615"), 18446744073709551615ULL);
  EXPECT_EQ(parse_seed("-9223372036854775808"), std::uint64_t{1} << 63);
  EXPECT_EQ(parse_seed("-2"), 18446744073709551614ULL);
  for (const char* bad :
       {"18446744073709551616", "-9223372036854775809", "99999999999999999999999999999"}) {
    const std::string msg = error_message([&] { (void)parse_seed(bad); });
    EXPECT_NE(msg.find(bad), std::string::npos) << msg;
    EXPECT_NE(msg.find("out of range"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[-9223372036854775808, 18446744073709551615]"), std::string::npos) << msg;
  }
  for (const char* bad : {"", "-", "abc", "12a", "1.5", " 1"}) {
    const std::string msg = error_message([&] { (void)parse_seed(bad); });
    EXPECT_NE(msg.find("[-9223372036854775808, 18446744073709551615]"), std::string::npos) << msg;
  }
  EXPECT_THROW((void)parse_seed("x"), tb::ValueError);
}

// ---------------------------------------------------------- sampling primitives

// PyTorch's CPU uniform_ for float32 maps the 24-bit draw to [from, to) in double and rounds
// once (checked against torch 1.13: nn.Linear's init, see nn_test.cpp); float arithmetic would
// differ in the last bit for some draws.
TEST(CpuSampling, UniformRangeUsesDoubleArithmeticLikePyTorch) {
  CpuGenerator gen(11);
  auto ref = gen.clone();
  float out[64];
  uniform_fill(gen, out, 64, -3.0, 5.5);
  auto& r = static_cast<CpuGenerator&>(*ref);
  std::lock_guard<std::mutex> lock(r.mutex());
  for (float v : out) {
    const double x = static_cast<double>(r.random() & 0xFFFFFF) / 16777216.0;
    EXPECT_EQ(v, static_cast<float>(x * (5.5 - -3.0) + -3.0));
    EXPECT_GE(v, -3.0f);
    EXPECT_LT(v, 5.5f);
  }
  // torch.manual_seed(0); torch.empty(15).uniform_(-b, b), b = 1/sqrt(5): draws 0 and 6.
  CpuGenerator g0(0);
  float w[15];
  uniform_fill(g0, w, 15, -0.44721359549995787, 0.44721359549995787);
  EXPECT_EQ(w[0], -0.003348207799717784f);
  EXPECT_EQ(w[6], -0.008860723115503788f);
}

TEST(CpuSampling, UniformDigitsForHalfAndBFloat16) {
  CpuGenerator gen(12);
  auto ref = gen.clone();
  float half[32], bf[32];
  uniform_fill_digits(gen, half, 32, 0.0, 1.0, 11);
  uniform_fill_digits(gen, bf, 32, 0.0, 1.0, 8);
  auto& r = static_cast<CpuGenerator&>(*ref);
  std::lock_guard<std::mutex> lock(r.mutex());
  for (float v : half)
    EXPECT_EQ(v, static_cast<float>(r.random() & 2047U) / 2048.0f);
  for (float v : bf)
    EXPECT_EQ(v, static_cast<float>(r.random() & 255U) / 256.0f);
  EXPECT_THROW(uniform_fill_digits(gen, half, 1, 0.0, 1.0, 24), tb::ValueError);
}

TEST(CpuSampling, NormalTailBlockIsRedrawn) {
  // n = 20: 20 uniforms, block [0,16), then 16 fresh uniforms for block [4,20).
  CpuGenerator a(21);
  CpuGenerator b(21);
  float n20[20], n16[16];
  normal_fill(a, n20, 20);
  normal_fill(b, n16, 16);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(n20[i], n16[i]) << i;
  // Consumption: 36 draws in total.
  CpuGenerator c(21);
  float skip[36];
  uniform_fill(c, skip, 36);
  float x, y;
  uniform_fill(a, &x, 1);
  uniform_fill(c, &y, 1);
  EXPECT_EQ(x, y);
}

TEST(CpuSampling, NormalScalarPathAndCache) {
  // n < 16 (or non-contiguous): per element (float)normal_distribution<double>.
  CpuGenerator a(31);
  CpuGenerator b(31);
  float f[5];
  normal_fill(a, f, 5, 1.0, 2.0);
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(f[i], static_cast<float>(normal_double(b, 1.0, 2.0)));
  EXPECT_EQ(a.get_state(), b.get_state());  // both hold the cached 6th sample
  EXPECT_EQ(a.get_state()[5040], 1);

  CpuGenerator c(31);
  CpuGenerator d(31);
  std::vector<float> nc(40);
  normal_fill(c, nc.data(), 40, 0.0, 1.0, /*contiguous=*/false);
  for (float v : nc)
    EXPECT_EQ(v, static_cast<float>(normal_double(d)));
}

TEST(CpuSampling, NormalDoubleVectorisedShape) {
  CpuGenerator gen(41);
  auto ref = gen.clone();
  double out[16];
  normal_fill(gen, out, 16, 0.5, 3.0);
  auto& r = static_cast<CpuGenerator&>(*ref);
  double u[16];
  uniform_fill(r, u, 16);
  for (int j = 0; j < 8; ++j) {
    const double radius = std::sqrt(-2 * std::log(1 - u[j]));
    const double theta = 2.0f * std::numbers::pi * u[j + 8];
    EXPECT_EQ(out[j], radius * std::cos(theta) * 3.0 + 0.5);
    EXPECT_EQ(out[j + 8], radius * std::sin(theta) * 3.0 + 0.5);
  }
  float big[4096];
  CpuGenerator g2(42);
  normal_fill(g2, big, 4096);
  double sum = 0, sq = 0;
  for (float v : big) {
    ASSERT_TRUE(std::isfinite(v));
    sum += v;
    sq += static_cast<double>(v) * v;
  }
  EXPECT_NEAR(sum / 4096, 0.0, 0.1);
  EXPECT_NEAR(sq / 4096, 1.0, 0.1);
}

TEST(CpuSampling, Bernoulli) {
  CpuGenerator gen(51);
  auto ref = gen.clone();
  std::vector<float> out(200);
  bernoulli_fill(gen, out.data(), 200, 0.3);
  auto& r = static_cast<CpuGenerator&>(*ref);
  std::vector<double> u(200);
  uniform_fill(r, u.data(), 200);
  for (int i = 0; i < 200; ++i)
    EXPECT_EQ(out[i], u[i] < 0.3 ? 1.0f : 0.0f) << i;

  bernoulli_fill(gen, out.data(), 200, 0.0);
  for (float v : out)
    EXPECT_EQ(v, 0.0f);
  bernoulli_fill(gen, out.data(), 200, 1.0);
  for (float v : out)
    EXPECT_EQ(v, 1.0f);
  EXPECT_THROW(bernoulli_fill(gen, out.data(), 1, 1.5), tb::ValueError);

  // Tensor-p variant: one float (24-bit) uniform per element.
  CpuGenerator g2(52);
  CpuGenerator g3(52);
  std::vector<float> p(100), o(100), uf(100);
  for (int i = 0; i < 100; ++i)
    p[i] = static_cast<float>(i) / 99.0f;
  bernoulli_fill(g2, o.data(), p.data(), 100);
  uniform_fill(g3, uf.data(), 100);
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(o[i], uf[i] < p[i] ? 1.0f : 0.0f);
  p[3] = -0.5f;
  EXPECT_THROW(bernoulli_fill(g2, o.data(), p.data(), 100), tb::ValueError);
}

TEST(CpuSampling, RandpermEdgeCases) {
  CpuGenerator gen(61);
  const std::vector<std::uint8_t> s = gen.get_state();
  std::int64_t one = -5;
  randperm(gen, &one, 1);
  EXPECT_EQ(one, 0);
  randperm(gen, nullptr, 0);
  EXPECT_EQ(gen.get_state(), s);  // n <= 1 draws nothing
  std::vector<std::int64_t> p(1000);
  randperm(gen, p.data(), 1000);
  std::vector<std::int64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < 1000; ++i)
    EXPECT_EQ(sorted[i], i);
  EXPECT_THROW(randperm(gen, nullptr, -1), tb::ValueError);
}

// ------------------------------------------------------------- thread safety

TEST(CpuGenerator, ConcurrentDrawsArePermutationOfSerialStream) {
  constexpr int kPerThread = 20000;
  CpuGenerator shared(2024);
  CpuGenerator serial(2024);
  std::vector<double> ref(2 * kPerThread);
  uniform_fill(serial, ref.data(), 2 * kPerThread);

  std::vector<double> t1(kPerThread), t2(kPerThread);
  std::vector<std::vector<std::uint8_t>> snapshots;
  auto worker = [&shared](std::vector<double>* out) {
    for (double& v : *out)
      uniform_fill(shared, &v, 1);
  };
  std::thread a(worker, &t1);
  std::thread b(worker, &t2);
  std::thread c([&] {
    for (int i = 0; i < 50; ++i)
      snapshots.push_back(shared.get_state());
  });
  a.join();
  b.join();
  c.join();

  std::vector<double> got = t1;
  got.insert(got.end(), t2.begin(), t2.end());
  std::sort(got.begin(), got.end());
  std::sort(ref.begin(), ref.end());
  EXPECT_EQ(got, ref);
  for (const auto& snap : snapshots) {  // no torn state: every snapshot is a valid state
    CpuGenerator g;
    EXPECT_NO_THROW(g.set_state(snap));
  }
}

// ------------------------------------------------------------------ Philox

TEST(Philox, Random123KnownAnswers) {
  struct Kat {
    Philox4 ctr;
    Philox2 key;
    Philox4 out;
  };
  // Random123 kat_vectors (philox4x32 10).
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5U, 0xe169c58dU, 0xbc57ac4cU, 0x9b00dbd8U}},
      {{0xffffffffU, 0xffffffffU, 0xffffffffU, 0xffffffffU},
       {0xffffffffU, 0xffffffffU},
       {0x408f276dU, 0x41c83b0eU, 0xa20bc7c6U, 0x6d5451fdU}},
      {{0x243f6a88U, 0x85a308d3U, 0x13198a2eU, 0x03707344U},
       {0xa4093822U, 0x299f31d0U},
       {0xd16cfe09U, 0x94fdccebU, 0x5001e420U, 0x24126ea1U}},
  };
  for (const Kat& k : kats) {
    const Philox4 o = philox4x32_10(k.ctr, k.key);
    EXPECT_EQ(o.x, k.out.x);
    EXPECT_EQ(o.y, k.out.y);
    EXPECT_EQ(o.z, k.out.z);
    EXPECT_EQ(o.w, k.out.w);
  }
}

TEST(Philox, StreamStateFollowsCurandLayout) {
  const std::uint64_t seed = 0x1234567890abcdefULL;
  PhiloxState s = PhiloxState::init(seed, /*subsequence=*/3, /*offset=*/0);
  const Philox2 key{0x90abcdefU, 0x12345678U};
  for (std::uint32_t block = 0; block < 3; ++block) {
    const Philox4 o = philox4x32_10(Philox4{block, 0, 3, 0}, key);
    EXPECT_EQ(s.next(), o.x);
    EXPECT_EQ(s.next(), o.y);
    EXPECT_EQ(s.next(), o.z);
    EXPECT_EQ(s.next(), o.w);
  }
  // skipahead by offset == drawing offset values.
  for (std::uint64_t off : {0ULL, 1ULL, 5ULL, 8ULL, 11ULL}) {
    PhiloxState a = PhiloxState::init(seed, 7, off);
    PhiloxState b = PhiloxState::init(seed, 7, 0);
    for (std::uint64_t i = 0; i < off; ++i)
      b.next();
    EXPECT_EQ(a.next(), b.next()) << off;
    const Philox4 a4 = a.next4();
    const std::uint32_t bx = b.next(), by = b.next(), bz = b.next(), bw = b.next();
    EXPECT_EQ(a4.x, bx);
    EXPECT_EQ(a4.y, by);
    EXPECT_EQ(a4.z, bz);
    EXPECT_EQ(a4.w, bw);
  }
}

TEST(Philox, UniformTransforms) {
  EXPECT_EQ(curand_uniform_from_bits(0), 2.3283064e-10f / 2.0f);
  EXPECT_EQ(curand_uniform_from_bits(0xffffffffU), 1.0f);  // curand_uniform is (0, 1]
  EXPECT_EQ(uniform_from_curand(1.0f, 2.0f, 4.0f), 2.0f);  // 1 maps back to `from`
  EXPECT_EQ(uniform_from_curand(0.5f, 2.0f, 4.0f), 3.0f);
  // z = x ^ (y << 21): 53 bits, scaled by 2^-53 plus half a step.
  EXPECT_EQ(curand_uniform_double_from_bits(0xffffffffU, 0xffffffffU),
            static_cast<double>(0x1FFFFF001FFFFFULL) * 0x1p-53 + 0x1p-54);
  EXPECT_EQ(curand_uniform_double_from_bits(0x1fffffU, 0xffffffffU), 1.0);  // (0, 1]
  EXPECT_GT(curand_uniform_double_from_bits(0, 0), 0.0);
}

TEST(PhiloxGenerator, StateOffsetAndReserve) {
  const Device dev(DeviceType::CUDA, 1);
  PhiloxGenerator gen(dev, 0x1122334455667788ULL);
  EXPECT_EQ(gen.device(), dev);
  EXPECT_EQ(gen.initial_seed(), 0x1122334455667788ULL);
  EXPECT_EQ(gen.get_offset(), 0U);
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    using P = std::pair<std::uint64_t, std::uint64_t>;
    const std::uint64_t seed = 0x1122334455667788ULL;
    EXPECT_EQ(gen.reserve(5), P(seed, 0));  // 5 rounds up to 8
    EXPECT_EQ(gen.reserve(8), P(seed, 8));
    EXPECT_EQ(gen.reserve(0), P(seed, 16));  // nothing reserved
    EXPECT_EQ(gen.reserve(1), P(seed, 16));
  }
  EXPECT_EQ(gen.get_offset(), 20U);

  std::vector<std::uint8_t> s = gen.get_state();
  ASSERT_EQ(s.size(), 16U);
  EXPECT_EQ(read_u64(s, 0), 0x1122334455667788ULL);
  EXPECT_EQ(read_u64(s, 8), 20U);
  EXPECT_EQ(s[0], 0x88);  // little-endian

  auto copy = gen.clone();
  gen.manual_seed(9);
  EXPECT_EQ(gen.get_offset(), 0U);  // reseeding resets the offset
  EXPECT_EQ(copy->get_offset(), 20U);
  EXPECT_EQ(copy->device(), dev);

  gen.set_state(s);
  EXPECT_EQ(gen.initial_seed(), 0x1122334455667788ULL);
  EXPECT_EQ(gen.get_offset(), 20U);
  EXPECT_EQ(gen.get_state(), s);

  gen.set_offset(400);
  EXPECT_EQ(gen.get_offset(), 400U);
  EXPECT_NE(error_message([&] { gen.set_offset(6); }).find("offset must be a multiple of 4"),
            std::string::npos);
  EXPECT_EQ(gen.get_offset(), 400U);

  const std::vector<std::uint8_t> wrong(15, 0);
  EXPECT_NE(error_message([&] { gen.set_state(wrong); }).find("RNG state is wrong size"),
            std::string::npos);
  std::vector<std::uint8_t> odd = s;
  write_u64(odd, 8, 6);
  EXPECT_NE(error_message([&] { gen.set_state(odd); }).find("offset must be a multiple of 4"),
            std::string::npos);
  EXPECT_EQ(gen.get_offset(), 400U);  // failed set_state leaves the state unchanged
}

// ---------------------------------------------------------- default generators

TEST(DefaultGenerators, CpuDefaultIsLazySingletonAndManualSeedApplies) {
  Generator& a = default_generator(Device(DeviceType::CPU, 0));
  Generator& b = default_generator(Device());
  EXPECT_EQ(&a, &b);
  EXPECT_EQ(a.device(), Device());
  ASSERT_NE(dynamic_cast<CpuGenerator*>(&a), nullptr);

  EXPECT_EQ(manual_seed(123), 123U);
  EXPECT_EQ(a.initial_seed(), 123U);
  auto& cpu = static_cast<CpuGenerator&>(a);
  CpuGenerator ref(123);
  float x[8], y[8];
  uniform_fill(cpu, x, 8);
  uniform_fill(ref, y, 8);
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(x[i], y[i]);
}

TEST(DefaultGenerators, MakeGeneratorUsesDefaultSeed) {
  auto gen = make_generator(Device());
  EXPECT_EQ(gen->initial_seed(), 67280421310721ULL);
  EXPECT_EQ(kDefaultRngSeed, 67280421310721ULL);
  CpuGenerator direct;
  EXPECT_EQ(gen->get_state(), direct.get_state());
  EXPECT_NE(gen.get(), &default_generator(Device()));
}

TEST(DefaultGenerators, FactoriesForOtherDevices) {
  EXPECT_THROW(register_generator_factory(
                   DeviceType::CPU, [](core::DeviceIndex) { return std::unique_ptr<Generator>(); }),
               tb::ValueError);
  EXPECT_THROW(register_generator_factory(DeviceType::PrivateUse1, nullptr), tb::ValueError);

  if (!has_generator_factory(DeviceType::CUDA)) {
    const std::string msg =
        error_message([] { (void)default_generator(Device(DeviceType::CUDA, 0)); });
    EXPECT_NE(msg.find("cuda"), std::string::npos) << msg;
    EXPECT_THROW((void)make_generator(Device(DeviceType::CUDA, 0)), tb::Error);
  }

  auto factory = [](core::DeviceIndex index) -> std::unique_ptr<Generator> {
    return std::make_unique<PhiloxGenerator>(Device(DeviceType::PrivateUse1, index));
  };
  if (!has_generator_factory(DeviceType::PrivateUse1)) {
    register_generator_factory(DeviceType::PrivateUse1, factory);
  }
  ASSERT_TRUE(has_generator_factory(DeviceType::PrivateUse1));
  EXPECT_THROW(register_generator_factory(DeviceType::PrivateUse1, factory), tb::ValueError);

  // A default created after manual_seed starts from that seed; later manual_seed reaches it.
  manual_seed(555);
  Generator& d3 = default_generator(Device(DeviceType::PrivateUse1, 3));
  EXPECT_EQ(&d3, &default_generator(Device(DeviceType::PrivateUse1, 3)));
  EXPECT_EQ(d3.device(), Device(DeviceType::PrivateUse1, 3));
  EXPECT_EQ(d3.initial_seed(), 555U);
  d3.set_offset(12);
  manual_seed(777);
  EXPECT_EQ(d3.initial_seed(), 777U);
  EXPECT_EQ(d3.get_offset(), 0U);
  EXPECT_EQ(default_generator(Device()).initial_seed(), 777U);

  auto fresh = make_generator(Device(DeviceType::PrivateUse1, 2));
  EXPECT_EQ(fresh->initial_seed(), kDefaultRngSeed);
  EXPECT_EQ(fresh->device(), Device(DeviceType::PrivateUse1, 2));
}

TEST(DefaultGenerators, ConcurrentFirstUseYieldsOneGenerator) {
  // Each ctest case runs in its own process: install the PrivateUse1 factory here too.
  if (!has_generator_factory(DeviceType::PrivateUse1)) {
    register_generator_factory(DeviceType::PrivateUse1, [](core::DeviceIndex index) {
      return std::make_unique<PhiloxGenerator>(Device(DeviceType::PrivateUse1, index));
    });
  }
  std::vector<Generator*> seen(8, nullptr);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back(
        [&seen, i] { seen[i] = &default_generator(Device(DeviceType::PrivateUse1, 5)); });
  }
  for (auto& t : threads)
    t.join();
  for (Generator* g : seen)
    EXPECT_EQ(g, seen[0]);
}

}  // namespace
}  // namespace tb::rng
