#include "engine/data/synthetic.h"

#include <cmath>
#include <mutex>
#include <vector>

#include "engine/core/error.h"
#include "engine/rng/cpu_generator.h"
#include "engine/rng/cpu_sampling.h"

namespace tb::data {

TensorDataset make_gaussian_blobs(const GaussianBlobsOptions& options) {
  TB_CHECK(options.num_samples >= 0, "[synthetic] num_samples must be >= 0, got ",
           options.num_samples);
  TB_CHECK(options.num_classes >= 1, "[synthetic] num_classes must be >= 1, got ",
           options.num_classes);
  TB_CHECK(options.num_features >= 1, "[synthetic] num_features must be >= 1, got ",
           options.num_features);
  TB_CHECK(std::isfinite(options.cluster_std) && options.cluster_std >= 0.0,
           "[synthetic] cluster_std must be finite and >= 0, got ", options.cluster_std);
  TB_CHECK(std::isfinite(options.center_box) && options.center_box >= 0.0,
           "[synthetic] center_box must be finite and >= 0, got ", options.center_box);
  const std::int64_t n = options.num_samples;
  const std::int64_t c = options.num_classes;
  const std::int64_t f = options.num_features;

  rng::CpuGenerator gen(options.seed);
  std::lock_guard lock(gen.mutex());
  std::vector<double> centers(static_cast<std::size_t>(c * f));
  for (double& v : centers) {
    v = rng::unlocked::uniform_double(gen, -options.center_box, options.center_box);
  }
  core::Tensor input = core::Tensor::empty({n, f}, core::ScalarType::Float32);
  core::Tensor target = core::Tensor::empty({n}, core::ScalarType::Int64);
  auto* x = input.data_ptr<float>();
  auto* y = target.data_ptr<std::int64_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t label = i % c;
    y[i] = label;
    for (std::int64_t k = 0; k < f; ++k) {
      const double center = centers[static_cast<std::size_t>(label * f + k)];
      x[i * f + k] = static_cast<float>(center + options.cluster_std *
                                                     rng::unlocked::normal_double(gen, 0.0, 1.0));
    }
  }
  return TensorDataset(input, target);
}

TextCorpus make_synthetic_text(std::int64_t num_bytes, std::uint64_t seed,
                               std::string_view alphabet) {
  TB_CHECK(num_bytes >= 0, "[synthetic] num_bytes must be >= 0, got ", num_bytes);
  TB_CHECK(!alphabet.empty(), "[synthetic] the alphabet is empty");
  rng::CpuGenerator gen(seed);
  std::lock_guard lock(gen.mutex());
  const auto size = static_cast<std::uint32_t>(alphabet.size());
  const std::uint32_t limit = UINT32_MAX - (UINT32_MAX % size);
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(num_bytes));
  for (std::uint8_t& b : bytes) {
    std::uint32_t r = gen.random();
    while (r >= limit) {
      r = gen.random();
    }
    b = static_cast<std::uint8_t>(alphabet[r % size]);
  }
  return text_corpus_from_bytes(std::move(bytes),
                                detail::str_cat("<synthetic text, seed ", seed, ">"));
}

}  // namespace tb::data
