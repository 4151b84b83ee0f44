// safetensors files (https://github.com/huggingface/safetensors format): checkpoint weights any
// tool can read. Layout: an 8-byte little-endian header length N, N bytes of JSON
// {"name": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ...,
//  "__metadata__": {"key": "text"}}, then the tensor bytes (offsets relative to the data area).
//
// Reading validates everything before allocating tensor memory: header length against the file
// size and a cap, the JSON, each dtype, shape and offset pair (in range, sized exactly
// numel·element size without overflow, non-overlapping, together covering the data area). A
// malformed, truncated or hostile file gets a tb::ValueError naming the file and the problem;
// nothing beyond the file's size is ever allocated.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/tensor.h"

namespace tb::train {

/// Named tensors in file order.
using TensorList = std::vector<std::pair<std::string, core::Tensor>>;

/// A loaded file: its tensors (CPU) in header order of offsets, and its metadata.
struct SafetensorsFile {
  TensorList tensors;                           ///< name -> tensor
  std::map<std::string, std::string> metadata;  ///< the "__metadata__" object
};

/// The largest header we accept (100 MB, as the reference implementation).
inline constexpr std::uint64_t kMaxSafetensorsHeader = 100'000'000;

/// Writes `tensors` (any device; copied to the CPU, made contiguous) and `metadata` to `path`
/// atomically: a temporary file in the same folder, synced to disk, renamed over `path`, then the
/// folder synced — a crash at any moment leaves the old file or the new one, whole. Names must be
/// unique and non-empty and must not be "__metadata__". Supported dtypes: F64, F32, F16, BF16, I64,
/// I32, I16, I8, U8, BOOL. A symbolic link is written through (the file it names replaced, the
/// link kept); a folder, device, FIFO or socket is refused; a failed write leaves no partial
/// file.
void save_safetensors(const std::filesystem::path& path, const TensorList& tensors,
                      const std::map<std::string, std::string>& metadata = {});

/// Reads and validates `path` (see the file comment).
SafetensorsFile load_safetensors(const std::filesystem::path& path);

/// Validates `path` as load_safetensors does (a tb::ValueError naming it otherwise: not
/// safetensors, a PyTorch file, truncated, hostile offsets) without reading its tensors: a
/// weights file checked before a run is created.
void check_safetensors(const std::filesystem::path& path);

/// Flushes a file's (or a directory's) data and metadata to the disk (fsync). Throws tb::Error
/// naming the path when it cannot be opened or synced.
void sync_to_disk(const std::filesystem::path& path);

}  // namespace tb::train
