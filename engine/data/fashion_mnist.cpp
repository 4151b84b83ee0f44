#include "engine/data/fashion_mnist.h"

#include <cmath>

#include "engine/core/error.h"
#include "engine/data/idx.h"

namespace tb::data {
namespace {

constexpr std::array<std::string_view, 10> kClassNames = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

const char* split_prefix(FashionMnistSplit split) {
  return split == FashionMnistSplit::kTrain ? "train" : "t10k";
}

}  // namespace

std::filesystem::path FashionMnist::images_file(const std::filesystem::path& dir,
                                                FashionMnistSplit split) {
  return dir / (std::string(split_prefix(split)) + "-images-idx3-ubyte.gz");
}

std::filesystem::path FashionMnist::labels_file(const std::filesystem::path& dir,
                                                FashionMnistSplit split) {
  return dir / (std::string(split_prefix(split)) + "-labels-idx1-ubyte.gz");
}

std::string_view FashionMnist::class_name(std::int64_t label) {
  TB_CHECK_T(IndexError, label >= 0 && label < kNumClasses, "[fashion-mnist] label ", label,
             " is outside 0..", kNumClasses - 1);
  return kClassNames[static_cast<std::size_t>(label)];
}

FashionMnist::FashionMnist(const FashionMnistOptions& options) : options_(options) {
  TB_CHECK(std::isfinite(options.mean), "[fashion-mnist] mean must be finite, got ", options.mean);
  TB_CHECK(std::isfinite(options.std) && options.std > 0.0f,
           "[fashion-mnist] std must be a finite value > 0, got ", options.std);
  options.augment.check("fashion-mnist", kRows, kCols);
  const std::filesystem::path images_path = images_file(options.dir, options.split);
  const std::filesystem::path labels_path = labels_file(options.dir, options.split);

  core::Tensor images = read_idx_u8(images_path, kImagesMagic, "images", "fashion-mnist");
  TB_CHECK(images.size(1) == kRows && images.size(2) == kCols, "[fashion-mnist] ",
           images_path.string(), ": images are ", images.size(1), "x", images.size(2),
           ", expected ", kRows, "x", kCols);
  core::Tensor labels_u8 = read_idx_u8(labels_path, kLabelsMagic, "labels", "fashion-mnist");
  TB_CHECK(images.size(0) == labels_u8.size(0), "[fashion-mnist] ", images_path.string(), " has ",
           images.size(0), " images but ", labels_path.string(), " has ", labels_u8.size(0),
           " labels");

  const std::int64_t n = labels_u8.size(0);
  TB_CHECK(n > 0, "[fashion-mnist] ", images_path.string(),
           ": holds no images (its header counts 0); a data set needs at least one");
  labels_ = core::Tensor::empty({n}, core::ScalarType::Int64);
  const auto* src = labels_u8.data_ptr<std::uint8_t>();
  auto* dst = labels_.data_ptr<std::int64_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    TB_CHECK(src[i] < kNumClasses, "[fashion-mnist] ", labels_path.string(), ": label ",
             int{src[i]}, " of sample ", i, " is outside 0..", kNumClasses - 1);
    dst[i] = src[i];
  }
  raw_images_ = images.view({n, kPixels});

  for (int v = 0; v < 256; ++v) {
    const float x = static_cast<float>(v) / 255.0f;
    lut_[static_cast<std::size_t>(v)] = options.normalize ? (x - options.mean) / options.std : x;
  }
}

Batch FashionMnist::get_batch(std::span<const std::int64_t> indices,
                              const BatchContext& ctx) const {
  const std::int64_t n = size();
  const auto b = static_cast<std::int64_t>(indices.size());
  core::Tensor input = core::Tensor::empty({b, kPixels}, core::ScalarType::Float32);
  core::Tensor target = core::Tensor::empty({b}, core::ScalarType::Int64);
  const auto* pixels = raw_images_.data_ptr<std::uint8_t>();
  const auto* labels = labels_.data_ptr<std::int64_t>();
  auto* in = input.data_ptr<float>();
  auto* tg = target.data_ptr<std::int64_t>();
  for (std::int64_t j = 0; j < b; ++j) {
    const std::int64_t i = indices[static_cast<std::size_t>(j)];
    TB_CHECK_T(IndexError, i >= 0 && i < n, "[fashion-mnist] sample index ", i,
               " is out of range for a split of ", n, " images");
    const std::uint8_t* row = pixels + i * kPixels;
    std::array<std::uint8_t, kPixels> augmented;
    if (options_.augment.enabled()) {
      augment_image_u8(row, augmented.data(), 1, kRows, kCols, options_.augment,
                       sample_seed(ctx.seed, ctx.row_offset + j));
      row = augmented.data();
    }
    float* out = in + j * kPixels;
    for (std::int64_t p = 0; p < kPixels; ++p) {
      out[p] = lut_[row[p]];
    }
    tg[j] = labels[i];
  }
  return Batch{input, target};
}

core::Tensor FashionMnist::images() const {
  const std::int64_t n = size();
  core::Tensor out = core::Tensor::empty({n, kPixels}, core::ScalarType::Float32);
  const auto* pixels = raw_images_.data_ptr<std::uint8_t>();
  auto* dst = out.data_ptr<float>();
  for (std::int64_t k = 0; k < n * kPixels; ++k) {
    dst[k] = lut_[pixels[k]];
  }
  return out;
}

}  // namespace tb::data
