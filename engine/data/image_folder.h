// A folder of images, one subfolder per class (torchvision's ImageFolder layout):
//   DIR/cat/001.png, DIR/cat/002.jpg, DIR/dog/001.jpeg, ...
// Classes are the subfolder names in sorted order (label 0 = the first). PNG and JPEG files are
// decoded once when the data set is loaded (in parallel), converted to grey or RGB and resized to
// one size; random crop and flip then happen per batch on the loader threads (ImageDataset).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/data/image_dataset.h"

namespace tb::data {

/// How to load an image folder.
struct ImageFolderOptions {
  std::filesystem::path dir;      ///< the training folder (one subfolder per class)
  std::filesystem::path val_dir;  ///< the validation folder ("" = hold out val_fraction of dir)
  /// Without val_dir: the last round(val_fraction × n) images of each class of n, by file name.
  double val_fraction = 0.1;
  std::int64_t height = 32;   ///< every image is resized to height × width
  std::int64_t width = 32;    ///< the width images are resized to
  std::int64_t channels = 3;  ///< 1 (grey) or 3 (RGB)
  /// Normalisation (mean/std empty and normalize on: the training split's per-channel
  /// statistics) and the training split's augmentation.
  ImageDatasetOptions image;
  int threads = 0;  ///< decoding threads (0 = the CPUs this process may use)
  /// The most bytes the decoded images may take (N × C × H × W); more is an error that says so.
  std::int64_t max_bytes = std::int64_t{8} << 30;
};

/// The class names of an image folder: its subfolders, sorted. Throws tb::ValueError naming the
/// folder when it cannot be read or has no subfolder.
std::vector<std::string> image_folder_classes(const std::filesystem::path& dir,
                                              const std::string& key = "data.path");

/// The image files of one class folder and its subfolders (.png, .jpg, .jpeg in any case; hidden
/// files and folders are left out), as torchvision's ImageFolder orders them: each folder's files
/// by name, before those of its subfolders. Other files (another format, a dangling link) are
/// added to `skipped` when given.
std::vector<std::filesystem::path> image_folder_files(
    const std::filesystem::path& class_dir, std::vector<std::filesystem::path>* skipped = nullptr);

/// Whether `class_dir` holds an image that image_folder_files would list: stops at the first one
/// (a config check, cheap on a folder of thousands).
bool image_folder_has_image(const std::filesystem::path& class_dir);

/// An image folder's two splits and its classes.
struct ImageFolderSplits {
  std::shared_ptr<ImageDataset> train;         ///< training images (augmented when asked)
  std::shared_ptr<ImageDataset> eval;          ///< validation images
  std::vector<std::string> classes;            ///< label i is classes[i]
  std::vector<std::int64_t> per_class;         ///< images of data.path per class (both splits)
  std::vector<std::filesystem::path> skipped;  ///< files left out: not .png, .jpg or .jpeg
  /// Files directly in data.path (or data.val_path), outside every class folder: left out.
  std::vector<std::filesystem::path> outside;
};

/// Loads the splits. Errors (tb::ValueError) name the folder or file: no class folders, a class
/// without images, a validation folder whose classes differ, a file that does not decode, more
/// decoded bytes than max_bytes, a val_fraction that leaves a split empty.
ImageFolderSplits load_image_folder(const ImageFolderOptions& options);

}  // namespace tb::data
