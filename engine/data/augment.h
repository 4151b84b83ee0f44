// Image augmentation on the loader threads: torchvision's RandomCrop(size, padding=p) (zero
// fill, the same size back) and RandomHorizontalFlip(p=0.5), drawn per sample from the batch's
// seed so that a batch is the same whichever worker builds it.
#pragma once

#include <cstdint>
#include <string>

namespace tb::data {

/// What to do to each training image. Evaluation splits are never augmented.
struct ImageAugment {
  /// Pad every side with this many zero pixels and crop the original size back at a uniformly
  /// random offset (torchvision.transforms.RandomCrop(size, padding)); 0 = off.
  std::int64_t crop_padding = 0;
  /// Mirror left-right with probability 1/2 (torchvision.transforms.RandomHorizontalFlip).
  bool horizontal_flip = false;
  /// True when any augmentation is on.
  bool enabled() const { return crop_padding > 0 || horizontal_flip; }
  /// Throws tb::ValueError naming `owner` and the field when crop_padding is negative or not
  /// smaller than both image sides.
  void check(const std::string& owner, std::int64_t height, std::int64_t width) const;
};

/// The seed of sample `j` of a batch whose BatchContext::seed is `batch_seed`.
std::uint64_t sample_seed(std::uint64_t batch_seed, std::int64_t j);

/// Writes the augmented copy of the uint8 image `src` to `dst` (both `channels` planes of
/// height × width, row-major; they must not overlap). One 64-bit draw from `seed` picks the crop
/// offset (dy, dx in 0..2·crop_padding) and the flip; pixels that come from the padding are 0.
void augment_image_u8(const std::uint8_t* src, std::uint8_t* dst, std::int64_t channels,
                      std::int64_t height, std::int64_t width, const ImageAugment& augment,
                      std::uint64_t seed);

}  // namespace tb::data
