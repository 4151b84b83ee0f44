// Fashion-MNIST (Zalando's 28x28 grey-scale clothing images, 10 classes) read from the IDX gzip
// files of Debian's `dataset-fashion-mnist` package or any folder holding the same four files.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>

#include "engine/core/tensor.h"
#include "engine/data/augment.h"
#include "engine/data/dataset.h"

namespace tb::data {

/// Where Debian's `dataset-fashion-mnist` package installs the files.
inline constexpr const char* kFashionMnistDefaultDir = "/usr/share/datasets/fashion-mnist";

/// Which half of Fashion-MNIST to read.
enum class FashionMnistSplit : std::uint8_t {
  kTrain,  ///< 60000 images: train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz
  kTest,   ///< 10000 images: t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz
};

/// How to load Fashion-MNIST.
struct FashionMnistOptions {
  /// Folder holding the four .gz files (plain, uncompressed files under the same names work too).
  std::filesystem::path dir = kFashionMnistDefaultDir;
  FashionMnistSplit split = FashionMnistSplit::kTrain;  ///< train or test
  /// Batch inputs are (x/255 - mean)/std when true, x/255 (in [0, 1]) when false; x is the
  /// pixel byte. The arithmetic is float32, like torchvision's ToTensor + Normalize.
  bool normalize = true;
  float mean = 0.2860f;  ///< mean of the training pixels scaled to [0, 1]
  float std = 0.3530f;   ///< their standard deviation; must be > 0
  /// Random crop / flip of each image in get_batch (for a training split; the registry never
  /// sets it on the test split).
  ImageAugment augment;
};

/// One split of Fashion-MNIST in memory. Sample i is (image i flattened to 784 pixels, label i).
/// Keeps the raw bytes (47 MB for the training split); get_batch() converts the selected images
/// to float32, so DataLoader workers share that work.
class FashionMnist final : public Dataset {
 public:
  static constexpr std::int64_t kRows = 28;                  ///< image height
  static constexpr std::int64_t kCols = 28;                  ///< image width
  static constexpr std::int64_t kPixels = kRows * kCols;     ///< 784 values per image
  static constexpr std::int64_t kNumClasses = 10;            ///< labels are 0..9
  static constexpr std::uint32_t kImagesMagic = 0x00000803;  ///< IDX magic of the image files
  static constexpr std::uint32_t kLabelsMagic = 0x00000801;  ///< IDX magic of the label files

  /// Reads and checks the split's image and label files. Throws tb::ValueError with a message
  /// "[fashion-mnist] <file>: ..." when a file is missing or unreadable, has a wrong magic
  /// number, is truncated or has trailing bytes (see read_idx_u8), when the images are not
  /// 28x28, when the image and label counts differ, or when a label is outside 0..9; and for a
  /// std that is not > 0.
  explicit FashionMnist(const FashionMnistOptions& options = {});

  /// The image file of `split` under `dir` (e.g. dir/train-images-idx3-ubyte.gz).
  static std::filesystem::path images_file(const std::filesystem::path& dir,
                                           FashionMnistSplit split);
  /// The label file of `split` under `dir` (e.g. dir/train-labels-idx1-ubyte.gz).
  static std::filesystem::path labels_file(const std::filesystem::path& dir,
                                           FashionMnistSplit split);
  /// The class name of a label ("T-shirt/top", "Trouser", ... "Ankle boot"). Throws
  /// tb::IndexError outside 0..9.
  static std::string_view class_name(std::int64_t label);

  /// Number of images (60000 train, 10000 test for the real files).
  std::int64_t size() const override { return labels_.size(0); }
  /// input: float32 [B, 784] (normalised per the options, augmented per options().augment from
  /// ctx.seed); target: int64 [B] labels. Throws tb::IndexError for an index outside [0, size()).
  Batch get_batch(std::span<const std::int64_t> indices, const BatchContext& ctx) const override;

  /// The raw pixels, uint8 [N, 784] (row-major 28x28 per image); reshape a view with
  /// raw_images().view({-1, 28, 28}).
  const core::Tensor& raw_images() const { return raw_images_; }
  /// The labels, int64 [N].
  const core::Tensor& labels() const { return labels_; }
  /// Every image converted like get_batch() does (without augmentation): float32 [N, 784] (a new
  /// tensor, 4 bytes per pixel).
  core::Tensor images() const;
  /// The options this split was loaded with.
  const FashionMnistOptions& options() const { return options_; }

 private:
  FashionMnistOptions options_;
  core::Tensor raw_images_;
  core::Tensor labels_;
  std::array<float, 256> lut_{};  // byte -> float32 input value
};

}  // namespace tb::data
