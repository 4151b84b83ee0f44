#include "engine/data/augment.h"

#include <cstring>

#include "engine/core/error.h"
#include "engine/data/dataloader.h"

namespace tb::data {

void ImageAugment::check(const std::string& owner, std::int64_t height, std::int64_t width) const {
  TB_CHECK(crop_padding >= 0 && crop_padding < height && crop_padding < width, "[", owner,
           "] random_crop: padding ", crop_padding, " must be >= 0 and smaller than the ", height,
           "x", width, " image");
}

std::uint64_t sample_seed(std::uint64_t batch_seed, std::int64_t j) {
  return mix64(batch_seed ^ (0x696d616765000000ULL + static_cast<std::uint64_t>(j)));
}

void augment_image_u8(const std::uint8_t* src, std::uint8_t* dst, std::int64_t channels,
                      std::int64_t height, std::int64_t width, const ImageAugment& augment,
                      std::uint64_t seed) {
  const std::uint64_t r = mix64(seed);
  const std::int64_t pad = augment.crop_padding;
  const auto span = static_cast<std::uint64_t>(2 * pad + 1);
  // Output pixel (y, x) reads input (y + dy − pad, x' + dx − pad), x' = x or its mirror.
  const std::int64_t dy = pad > 0 ? static_cast<std::int64_t>(r % span) - pad : 0;
  const std::int64_t dx = pad > 0 ? static_cast<std::int64_t>((r >> 20) % span) - pad : 0;
  const bool flip = augment.horizontal_flip && ((r >> 63) != 0);
  for (std::int64_t c = 0; c < channels; ++c) {
    const std::uint8_t* plane = src + c * height * width;
    std::uint8_t* out = dst + c * height * width;
    for (std::int64_t y = 0; y < height; ++y) {
      const std::int64_t sy = y + dy;
      std::uint8_t* row = out + y * width;
      if (sy < 0 || sy >= height) {
        std::memset(row, 0, static_cast<std::size_t>(width));
        continue;
      }
      const std::uint8_t* in = plane + sy * width;
      for (std::int64_t x = 0; x < width; ++x) {
        // The crop comes first, the flip mirrors the cropped image (torchvision's order in
        // Compose([RandomCrop, RandomHorizontalFlip])).
        const std::int64_t sx = (flip ? width - 1 - x : x) + dx;
        row[x] = sx >= 0 && sx < width ? in[sx] : std::uint8_t{0};
      }
    }
  }
}

}  // namespace tb::data
