#include "engine/data/image_dataset.h"

#include <cmath>
#include <utility>

#include "engine/core/error.h"

namespace tb::data {

ImageDataset::ImageDataset(std::string name, core::Tensor images, core::Tensor labels,
                           std::int64_t classes, const ImageDatasetOptions& options)
    : name_(std::move(name)),
      images_(std::move(images)),
      labels_(std::move(labels)),
      classes_(classes),
      options_(options) {
  TB_CHECK(
      images_.dim() == 4 && images_.dtype() == core::ScalarType::UInt8 && images_.is_contiguous(),
      "[", name_, "] images must be a contiguous uint8 [N, C, H, W] tensor");
  TB_CHECK(labels_.dim() == 1 && labels_.dtype() == core::ScalarType::Int64 &&
               labels_.size(0) == images_.size(0) && labels_.is_contiguous(),
           "[", name_, "] labels must be int64 [", images_.size(0), "]");
  TB_CHECK(classes_ >= 1, "[", name_, "] classes must be >= 1, got ", classes_);
  const std::int64_t c = channels();
  auto per_channel = [&](std::vector<float>& v, const char* what, float fallback) {
    if (v.empty()) v.assign(1, fallback);
    TB_CHECK(static_cast<std::int64_t>(v.size()) == 1 || static_cast<std::int64_t>(v.size()) == c,
             "[", name_, "] ", what, " has ", v.size(), " values for ", c, " channels");
    if (v.size() == 1) v.assign(static_cast<std::size_t>(c), v[0]);
  };
  per_channel(options_.mean, "mean", 0.0f);
  per_channel(options_.std, "std", 1.0f);
  for (std::int64_t k = 0; k < c; ++k) {
    const auto kk = static_cast<std::size_t>(k);
    TB_CHECK(std::isfinite(options_.mean[kk]), "[", name_, "] mean of channel ", k,
             " must be finite, got ", options_.mean[kk]);
    TB_CHECK(std::isfinite(options_.std[kk]) && options_.std[kk] > 0.0f, "[", name_,
             "] std of channel ", k, " must be a finite value > 0, got ", options_.std[kk]);
  }
  options_.augment.check(name_, height(), width());
  const auto* lab = labels_.data_ptr<std::int64_t>();
  for (std::int64_t i = 0; i < size(); ++i)
    TB_CHECK(lab[i] >= 0 && lab[i] < classes_, "[", name_, "] label ", lab[i], " of sample ", i,
             " is outside 0..", classes_ - 1);
  lut_.resize(static_cast<std::size_t>(c * 256));
  for (std::int64_t k = 0; k < c; ++k)
    for (int v = 0; v < 256; ++v) {
      const float x = static_cast<float>(v) / 255.0f;
      const auto kk = static_cast<std::size_t>(k);
      lut_[static_cast<std::size_t>(k * 256 + v)] =
          options_.normalize ? (x - options_.mean[kk]) / options_.std[kk] : x;
    }
}

Batch ImageDataset::get_batch(std::span<const std::int64_t> indices,
                              const BatchContext& ctx) const {
  const std::int64_t n = size();
  const std::int64_t c = channels(), plane = height() * width(), per = c * plane;
  const auto b = static_cast<std::int64_t>(indices.size());
  core::Tensor input = core::Tensor::empty({b, per}, core::ScalarType::Float32);
  core::Tensor target = core::Tensor::empty({b}, core::ScalarType::Int64);
  const auto* pixels = images_.data_ptr<std::uint8_t>();
  const auto* labels = labels_.data_ptr<std::int64_t>();
  auto* in = input.data_ptr<float>();
  auto* tg = target.data_ptr<std::int64_t>();
  std::vector<std::uint8_t> scratch(options_.augment.enabled() ? static_cast<std::size_t>(per) : 0);
  for (std::int64_t j = 0; j < b; ++j) {
    const std::int64_t i = indices[static_cast<std::size_t>(j)];
    TB_CHECK_T(IndexError, i >= 0 && i < n, "[", name_, "] sample index ", i,
               " is out of range for a split of ", n, " images");
    const std::uint8_t* img = pixels + i * per;
    if (options_.augment.enabled()) {
      augment_image_u8(img, scratch.data(), c, height(), width(), options_.augment,
                       sample_seed(ctx.seed, ctx.row_offset + j));
      img = scratch.data();
    }
    float* out = in + j * per;
    for (std::int64_t k = 0; k < c; ++k) {
      const float* lut = lut_.data() + k * 256;
      for (std::int64_t p = 0; p < plane; ++p)
        out[k * plane + p] = lut[img[k * plane + p]];
    }
    tg[j] = labels[i];
  }
  return Batch{input, target};
}

}  // namespace tb::data
