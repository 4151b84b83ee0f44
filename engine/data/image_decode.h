// Decoding PNG and JPEG files (Debian's libpng and libjpeg-turbo) into 8-bit pixels, and resizing
// them the way torchvision's Resize(antialias=True) does (PIL's separable triangle filter, its
// support widened by the scale when shrinking). Every size is checked before memory is taken.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace tb::data {

/// The largest image decoded (width × height): 2^28 pixels, e.g. 16384 × 16384.
inline constexpr std::int64_t kMaxImagePixels = std::int64_t{1} << 28;

/// A decoded image: rows of pixels, channels interleaved (HWC), 8 bits each.
struct DecodedImage {
  std::int64_t width = 0;            ///< pixels per row
  std::int64_t height = 0;           ///< rows
  std::int64_t channels = 0;         ///< 1 (grey) or 3 (RGB)
  std::vector<std::uint8_t> pixels;  ///< height × width × channels
};

/// Decodes PNG or JPEG `bytes` (told apart by their signature) to `channels` (1: grey, 3: RGB;
/// colour is converted, alpha dropped, 16-bit samples reduced). Throws tb::ValueError naming
/// `name`: not a PNG or JPEG (and what it starts with), an image larger than kMaxImagePixels, or
/// the decoder's own words for a truncated or corrupt file.
DecodedImage decode_image(std::span<const std::uint8_t> bytes, std::int64_t channels,
                          const std::string& name);

/// decode_image of a file's bytes (a file that cannot be read is named).
DecodedImage decode_image_file(const std::filesystem::path& file, std::int64_t channels);

/// `image` resized to height × width as channel planes (CHW), with PIL's antialiased bilinear
/// filter (as torchvision.transforms.Resize((height, width), antialias=True) on a PIL image).
std::vector<std::uint8_t> resize_to_planes(const DecodedImage& image, std::int64_t height,
                                           std::int64_t width);

}  // namespace tb::data
