// IDX files (the format of MNIST and Fashion-MNIST): a big-endian header — magic 0x0000TTDD
// (TT element type, DD number of dimensions) followed by DD uint32 sizes — then the row-major
// payload. Files may be gzip-compressed or plain; zlib reads both.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string_view>

#include "engine/core/tensor.h"

namespace tb::data {

/// IDX element-type code of unsigned bytes (the third byte of the magic).
inline constexpr std::uint32_t kIdxTypeUInt8 = 0x08;

/// The magic number of an IDX file of unsigned bytes with `ndims` dimensions:
/// 0x00000800 | ndims (0x00000801 for labels, 0x00000803 for images).
constexpr std::uint32_t idx_u8_magic(std::uint32_t ndims) noexcept {
  return (kIdxTypeUInt8 << 8) | ndims;
}

/// Reads an IDX file of unsigned bytes (gzip-compressed or plain) into a uint8 CPU tensor whose
/// shape is the header's sizes.
///
/// `expected_magic` must be idx_u8_magic(ndims) for the expected number of dimensions; `what`
/// names the items counted by the first size in messages ("images", "labels"); `component`
/// starts every message ("[component] path: ..."). Throws tb::ValueError when the file cannot be
/// opened ("cannot open <path>: <reason>"), the header is cut short, the magic differs ("bad magic
/// 0x00000803, expected 0x00000801 (labels)"), the payload is shorter than the header says
/// ("truncated: header says 60000 images of 28x28 (47040000 bytes) but only 1234 bytes follow"),
/// bytes follow the payload ("... but 47040010 bytes follow"), or the gzip data is corrupt.
core::Tensor read_idx_u8(const std::filesystem::path& path, std::uint32_t expected_magic,
                         std::string_view what, std::string_view component = "idx");

}  // namespace tb::data
