// Synthetic datasets for tests and demos, each a deterministic function of its seed: Gaussian
// blobs for classification and random-token text for the byte-level text pipeline.
#pragma once

#include <cstdint>
#include <string_view>

#include "engine/data/dataset.h"
#include "engine/data/text_dataset.h"

namespace tb::data {

/// Shape of a Gaussian-blob classification set.
struct GaussianBlobsOptions {
  std::int64_t num_samples = 1000;  ///< N >= 0
  std::int64_t num_classes = 3;     ///< C >= 1: one blob per class
  std::int64_t num_features = 2;    ///< F >= 1
  double cluster_std = 1.0;         ///< standard deviation of each blob (>= 0)
  double center_box = 10.0;         ///< blob centres are uniform in [-center_box, center_box]^F
  std::uint64_t seed = 0;           ///< everything is drawn from a CpuGenerator seeded with this
};

/// Classification data like sklearn's make_blobs: draws C centres (uniform, C x F draws in
/// row-major order), then for each sample i in order its label i % C (classes balanced and
/// interleaved) and its F features centre[label] + cluster_std * normal. input float32 [N, F],
/// target int64 [N]. The same options give the same tensors on every machine. Throws
/// tb::ValueError for options out of range.
TensorDataset make_gaussian_blobs(const GaussianBlobsOptions& options = {});

/// A corpus of `num_bytes` bytes, each drawn uniformly from `alphabet` (unbiased, one 32-bit
/// draw or more per byte) with a CpuGenerator seeded with `seed`; its source name is
/// "<synthetic text, seed S>". Throws tb::ValueError for num_bytes < 0 or an empty alphabet.
TextCorpus make_synthetic_text(std::int64_t num_bytes, std::uint64_t seed,
                               std::string_view alphabet = "abcdefgh \n");

}  // namespace tb::data
