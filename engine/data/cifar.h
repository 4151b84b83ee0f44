// CIFAR-10 and CIFAR-100 in their binary version (https://www.cs.toronto.edu/~kriz/cifar.html):
// files of fixed-size records, a label byte (CIFAR-100: coarse then fine label) followed by the
// 32x32 image as three 1024-byte planes, red, green, blue.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/data/image_dataset.h"

namespace tb::data {

/// Which CIFAR.
enum class CifarVariant : std::uint8_t {
  kCifar10,   ///< 10 classes; data_batch_1..5.bin (50000), test_batch.bin (10000)
  kCifar100,  ///< 100 fine / 20 coarse classes; train.bin (50000), test.bin (10000)
};

/// How to load a CIFAR split.
struct CifarOptions {
  /// The folder of the binary version (cifar-10-batches-bin, cifar-100-binary) or the folder
  /// that holds it.
  std::filesystem::path dir;
  CifarVariant variant = CifarVariant::kCifar10;  ///< which CIFAR
  bool train = true;                              ///< training files, else the test file
  bool fine_labels = true;  ///< CIFAR-100: the 100 fine labels, else the 20 coarse ones
  /// Normalisation (mean/std empty: the training set's per-channel statistics, as commonly
  /// used) and augmentation.
  ImageDatasetOptions image;
};

/// The records of CIFAR binary files, appended file by file.
struct CifarRecords {
  std::vector<std::uint8_t> pixels;  ///< 3072 bytes per image, R, G, B planes of 32x32
  std::vector<std::int64_t> labels;  ///< one per image
};

/// The data set's name in messages: "cifar-10" or "cifar-100".
std::string cifar_name(CifarVariant variant);
/// Bytes per record: 3073 (CIFAR-10) or 3074 (CIFAR-100).
std::int64_t cifar_record_bytes(CifarVariant variant);
/// The folder holding the variant's files: `dir` itself, or its cifar-10-batches-bin /
/// cifar-100-binary subfolder when `dir` holds that instead. Throws tb::ValueError naming `dir`
/// and the files expected when neither holds them.
std::filesystem::path cifar_folder(const std::filesystem::path& dir, CifarVariant variant);
/// The files of a split, in order, under the variant's folder (see cifar_folder).
std::vector<std::filesystem::path> cifar_files(const std::filesystem::path& dir,
                                               CifarVariant variant, bool train);
/// Checks and appends the records of one file's bytes to `out`. Throws tb::ValueError naming
/// `file`: no records, a size that is not a whole number of records (the offset and size of the
/// short last record), or a label out of range (its offset and record number).
void parse_cifar_records(std::span<const std::uint8_t> bytes, CifarVariant variant,
                         bool fine_labels, const std::string& file, CifarRecords& out);
/// Reads a split (every file checked before the images are put together).
std::shared_ptr<ImageDataset> load_cifar(const CifarOptions& options);

}  // namespace tb::data
