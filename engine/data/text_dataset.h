// Byte-level text: a corpus read from a text file or a folder of them (default: the fortune
// cookies of Debian's `fortunes` package), split into train/validation by position, sampled as
// windows of `context_length` bytes whose targets are the same bytes shifted by one.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/data/dataset.h"

namespace tb::data {

/// Where Debian's `fortunes` package installs its text files.
inline constexpr const char* kTextDefaultDir = "/usr/share/games/fortunes";
/// Tokens are bytes: values 0..255.
inline constexpr std::int64_t kByteVocabSize = 256;

/// The bytes of one or more text files, concatenated in file order (nothing is inserted between
/// files). Cheap to copy: the bytes are shared and immutable.
struct TextCorpus {
  std::string source;  ///< the file or folder read, or a name for in-memory text (for messages)
  std::vector<std::filesystem::path> files;    ///< the files read, in this order
  std::vector<std::filesystem::path> skipped;  ///< files left out (see load_text_corpus)
  std::vector<std::filesystem::path> binary;   ///< of those, the ones with a NUL byte
  std::shared_ptr<const std::vector<std::uint8_t>> bytes;  ///< the concatenation (never null)

  /// Number of bytes.
  std::int64_t size() const { return static_cast<std::int64_t>(bytes->size()); }
};

/// Reads a text file, or every text file under a folder (recursively).
///
/// Folder rules, so that the corpus is the same on every run and machine: files are taken in
/// byte-wise order of their path (std::filesystem::path::string()); hidden files and folders
/// (name starting with '.') are not visited; files whose name ends in ".dat" (the fortune
/// index files) and files containing a NUL byte (binary) are skipped; a file reached twice
/// through symbolic links (fortunes' "art.u8 -> art") is read once, at its first path in that
/// order; folders that may not be read are skipped. Skipped files are listed in
/// TextCorpus::skipped. A file given directly is read whatever its name, but must not contain a
/// NUL byte.
///
/// Throws tb::ValueError: "[text dataset] cannot open <path>: <reason>" (missing path,
/// unreadable file), "[text dataset] <file> is not a text file (NUL byte at offset k)" (a file
/// given directly), "[text dataset] no text files under <folder> (...)".
TextCorpus load_text_corpus(const std::filesystem::path& path = kTextDefaultDir);

/// A corpus of in-memory bytes; `name` stands for the source in messages.
TextCorpus text_corpus_from_bytes(std::vector<std::uint8_t> bytes, std::string name);

/// Which part of the corpus a TextDataset samples from.
enum class TextSplit : std::uint8_t {
  kTrain,       ///< the first (1 - val_fraction) of the bytes
  kValidation,  ///< the last val_fraction of the bytes
};

/// Where the windows of a TextDataset start.
enum class TextSampling : std::uint8_t {
  /// Each sample is a window at a uniformly random start in [0, split bytes - context_length - 1]
  /// (inclusive), drawn from the batch's seed (BatchContext::seed): the windows depend on the
  /// loader's seed, the epoch, the batch index and the position in the batch, not on the sample
  /// indices, so they do not depend on shuffle or on the number of workers.
  kRandom,
  /// Sample i is the window starting at i * context_length: non-overlapping windows that tile
  /// the split (a trailing part too short for a window is not used). Use it for evaluation.
  kSequential,
};

/// How a TextDataset cuts windows.
struct TextDatasetOptions {
  std::int64_t context_length = 128;  ///< T: bytes per sample; must be >= 1
  /// Part of the corpus, at its end, that forms the validation split: floor(bytes *
  /// val_fraction) bytes. In [0, 1).
  double val_fraction = 0.1;
  TextSampling sampling = TextSampling::kRandom;  ///< where windows start
  /// kRandom only: samples per epoch; 0 means (split bytes - 1) / context_length, as many as
  /// kSequential has, so an epoch sees about as many bytes as the split holds.
  std::int64_t samples_per_epoch = 0;
};

/// Windows of one split of a TextCorpus. A sample with start s has input = bytes[s, s+T) and
/// target = bytes[s+1, s+T+1); a batch is input int64 [B, T], target int64 [B, T].
class TextDataset final : public Dataset {
 public:
  /// Checks the options and that the split holds at least context_length + 1 bytes. Throws
  /// tb::ValueError: "[text dataset] context length 512 exceeds the 300 bytes of the validation
  /// split of <source> (a window needs context length + 1 bytes)", or for options out of range.
  TextDataset(TextCorpus corpus, TextSplit split, const TextDatasetOptions& options = {});

  /// The first byte and the byte count of `split` in a corpus of `total` bytes.
  static std::pair<std::int64_t, std::int64_t> split_range(std::int64_t total, TextSplit split,
                                                           double val_fraction);

  /// Number of samples per epoch (see TextDatasetOptions).
  std::int64_t size() const override { return size_; }
  /// input and target int64 [B, T]. Throws tb::IndexError for an index outside [0, size()).
  Batch get_batch(std::span<const std::int64_t> indices, const BatchContext& ctx) const override;

  /// The bytes of this split.
  std::span<const std::uint8_t> split_bytes() const;
  /// The corpus the split is taken from.
  const TextCorpus& corpus() const { return corpus_; }
  /// The split.
  TextSplit split() const { return split_; }
  /// The options (samples_per_epoch resolved).
  const TextDatasetOptions& options() const { return options_; }

 private:
  TextCorpus corpus_;
  TextSplit split_;
  TextDatasetOptions options_;
  std::int64_t begin_ = 0;
  std::int64_t length_ = 0;
  std::int64_t size_ = 0;
};

/// Samples per epoch of windows of `t` tokens over a split of `length`: (length − 1) / t
/// non-overlapping tiles with kSequential; with kRandom `samples_per_epoch`, which 0 sets to that
/// tile count. TextDataset's and TokenDataset's size().
std::int64_t window_count(std::int64_t length, std::int64_t t, TextSampling sampling,
                          std::int64_t& samples_per_epoch);

/// A batch of windows being built: input and target int64 [B, T] (to be filled) and where each
/// sample's window starts within the split.
struct WindowBatch {
  core::Tensor input;                ///< int64 [B, T]
  core::Tensor target;               ///< int64 [B, T]
  std::vector<std::int64_t> starts;  ///< B window starts
};

/// Allocates a WindowBatch for `indices` and places its windows within a split of `length`
/// tokens, `t` per window: with kRandom a uniform draw in [0, length − t − 1] per sample
/// (rejection sampling, no modulo bias) from a generator seeded with ctx.seed; with kSequential
/// index·t. An index outside [0, size) is a tb::IndexError naming `what`. TextDataset's and
/// TokenDataset's sampling.
WindowBatch window_batch(std::span<const std::int64_t> indices, const BatchContext& ctx,
                         TextSampling sampling, std::int64_t length, std::int64_t t,
                         std::int64_t size, const char* what);

/// The bytes of an integer token tensor (values 0..255, any shape, row-major) as a string, e.g.
/// to show a batch row or generated text. Throws tb::ValueError for a value outside 0..255 or a
/// non-integer dtype.
std::string decode_bytes(const core::Tensor& tokens);

}  // namespace tb::data
