// Images held in memory as bytes (CIFAR batches, decoded image folders): uint8 [N, C, H, W]
// planes and int64 labels; batches convert the selected images to float32 on the loader threads,
// normalised per channel and augmented per sample.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/data/augment.h"
#include "engine/data/dataset.h"

namespace tb::data {

/// How an ImageDataset turns bytes into inputs.
struct ImageDatasetOptions {
  /// True: (x/255 − mean[c]) / std[c] per channel c (torchvision's ToTensor + Normalize, in
  /// float32); false: x/255 in [0, 1].
  bool normalize = true;
  std::vector<float> mean;  ///< one per channel (or one for all)
  std::vector<float> std;   ///< one per channel (or one for all), each > 0
  ImageAugment augment;     ///< per-sample random crop / flip (training splits)
};

/// A split of labelled images. Sample i is (image i flattened to C·H·W values, channel-major,
/// label i).
class ImageDataset final : public Dataset {
 public:
  /// `images`: uint8 [N, C, H, W]; `labels`: int64 [N] with values in [0, classes). `name`
  /// ("cifar-10") prefixes messages. Throws tb::ValueError for shapes or dtypes that do not fit,
  /// a mean/std list whose length is neither 1 nor C, a std that is not > 0, or augmentation that
  /// does not fit the image size.
  ImageDataset(std::string name, core::Tensor images, core::Tensor labels, std::int64_t classes,
               const ImageDatasetOptions& options);

  /// Number of images.
  std::int64_t size() const override { return labels_.size(0); }
  /// input: float32 [B, C·H·W]; target: int64 [B]. Throws tb::IndexError for an index outside
  /// [0, size()).
  Batch get_batch(std::span<const std::int64_t> indices, const BatchContext& ctx) const override;

  const core::Tensor& raw_images() const { return images_; }       ///< uint8 [N, C, H, W]
  const core::Tensor& labels() const { return labels_; }           ///< int64 [N]
  std::int64_t channels() const { return images_.size(1); }        ///< C
  std::int64_t height() const { return images_.size(2); }          ///< H
  std::int64_t width() const { return images_.size(3); }           ///< W
  std::int64_t classes() const { return classes_; }                ///< labels are 0..classes-1
  const ImageDatasetOptions& options() const { return options_; }  ///< as constructed

 private:
  std::string name_;
  core::Tensor images_;
  core::Tensor labels_;
  std::int64_t classes_;
  ImageDatasetOptions options_;
  std::vector<float> lut_;  // [C][256]: byte -> input value of channel c
};

}  // namespace tb::data
