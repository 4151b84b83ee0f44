// Token files, memory-mapped: llm.c's .bin shards (a 256-int32 header — magic 20240520 with
// uint16 GPT-2 tokens, or 20240801 with uint32 Llama-3 tokens — then the tokens; see llm.c's
// dev/data/data_common.py) and nanoGPT's raw uint16 train.bin/val.bin (data/*/prepare.py).
// A TokenDataset samples windows of context_length tokens from one or more such files, read as
// one concatenated stream, exactly as TextDataset does with bytes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/data/dataset.h"
#include "engine/data/text_dataset.h"

namespace tb::data {

/// How to read a token file.
enum class TokenFormat : std::uint8_t {
  kAuto,    ///< llm.c when the file starts with one of its magic numbers, else raw uint16
  kLlmc,    ///< llm.c .bin: 1024-byte header, then uint16 or uint32 tokens
  kUint16,  ///< nanoGPT: raw little-endian uint16 tokens, no header
};

/// Parses "auto", "llmc", "uint16" (a tb::ValueError lists them otherwise).
TokenFormat token_format_from_name(const std::string& name);

/// llm.c's header: 256 little-endian int32, [0] magic, [1] version, [2] token count.
inline constexpr std::int64_t kLlmcHeaderBytes = 256 * 4;
inline constexpr std::int32_t kLlmcMagicGpt2 = 20240520;    ///< version 1, uint16 tokens
inline constexpr std::int32_t kLlmcMagicLlama3 = 20240801;  ///< version 7, uint32 tokens

/// Where the tokens of a file are: offset of the first token, bytes per token, count.
struct TokenLayout {
  std::int64_t offset = 0;       ///< bytes before the first token (0 or 1024)
  std::int64_t token_bytes = 2;  ///< 2 (uint16) or 4 (uint32)
  std::int64_t count = 0;        ///< tokens in the file
};

/// Checks the header and size of a token file's bytes (`file` names it in messages) and says
/// where its tokens are. Throws tb::ValueError: a file shorter than the header, a bad magic or
/// version (format llmc), a header count that does not match the size (truncated, or trailing
/// bytes), an odd size (raw uint16), or no tokens.
TokenLayout parse_token_layout(std::span<const std::uint8_t> bytes, TokenFormat format,
                               const std::string& file);

/// One memory-mapped token file (read-only; the mapping lives as long as the object).
class TokenFile {
 public:
  /// Maps and checks `path` (see parse_token_layout). Throws tb::ValueError naming the file when
  /// it cannot be opened or mapped.
  TokenFile(const std::filesystem::path& path, TokenFormat format);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  const std::filesystem::path& path() const { return path_; }  ///< the file
  const TokenLayout& layout() const { return layout_; }        ///< where the tokens are
  std::int64_t size() const { return layout_.count; }          ///< number of tokens
  /// Token `i` (0 <= i < size(); not checked).
  std::int64_t token(std::int64_t i) const;

 private:
  std::filesystem::path path_;
  const std::uint8_t* data_ = nullptr;
  std::size_t mapped_ = 0;
  TokenLayout layout_;
};

/// The files a path names: the file itself, or, when its last component holds `*` or `?`,
/// the matching files of that folder in byte-wise name order (llm.c's shard lists, e.g.
/// "fineweb10B/fineweb_train_*.bin"). Throws tb::ValueError when nothing matches.
std::vector<std::filesystem::path> expand_token_paths(const std::string& pattern);

/// Token files read as one concatenated stream of tokens, or tokens held in memory (a text
/// encoded at load time, see token_stream_from_ids).
struct TokenStream {
  std::string source;                                       ///< the path or pattern (for messages)
  std::vector<std::shared_ptr<TokenFile>> files;            ///< in stream order
  std::vector<std::int64_t> starts;                         ///< first stream position of each file
  std::shared_ptr<const std::vector<std::int32_t>> memory;  ///< in-memory tokens (no files)
  std::int64_t size = 0;                                    ///< total tokens
  /// Copies tokens [begin, begin + n) to `out`, checking each is < vocab. Throws
  /// tb::ValueError naming the file, the byte offset and the token otherwise.
  void read(std::int64_t begin, std::int64_t n, std::int64_t vocab, std::int64_t* out) const;
};

/// A stream of in-memory tokens; `source` names them in messages.
TokenStream token_stream_from_ids(std::vector<std::int32_t> ids, std::string source);

/// Opens every file of `pattern` (expand_token_paths) as a stream.
TokenStream open_token_stream(const std::string& pattern, TokenFormat format);

/// Options of a TokenDataset.
struct TokenDatasetOptions {
  std::int64_t context_length = 64;  ///< T: tokens per sample (>= 1)
  std::int64_t vocab = 50257;        ///< every token must be below this
  /// Part of the stream, at its end, used as the validation split when there is no separate
  /// validation file: the last floor(tokens × val_fraction). In [0, 1).
  double val_fraction = 0.0;
  TextSplit split = TextSplit::kTrain;            ///< which part of the stream (val_fraction)
  TextSampling sampling = TextSampling::kRandom;  ///< as TextDataset
  std::int64_t samples_per_epoch = 0;             ///< as TextDataset (0: one pass)
};

/// Windows of a token stream: input = tokens[s, s+T), target = tokens[s+1, s+T+1), int64
/// [B, T] each; random starts from the batch's seed or sequential tiles, as TextDataset.
class TokenDataset final : public Dataset {
 public:
  /// Throws tb::ValueError when the split is shorter than context_length + 1 tokens or an
  /// option is out of range.
  TokenDataset(TokenStream stream, const TokenDatasetOptions& options);
  /// Samples per epoch.
  std::int64_t size() const override { return size_; }
  /// input and target int64 [B, T]; a token outside the vocabulary is a tb::ValueError naming
  /// its file and offset; an index outside [0, size()) a tb::IndexError.
  Batch get_batch(std::span<const std::int64_t> indices, const BatchContext& ctx) const override;
  /// The stream.
  const TokenStream& stream() const { return stream_; }
  /// First token and token count of this split within the stream.
  std::int64_t begin() const { return begin_; }
  std::int64_t length() const { return length_; }  ///< tokens in this split

 private:
  TokenStream stream_;
  TokenDatasetOptions options_;
  std::int64_t begin_ = 0;
  std::int64_t length_ = 0;
  std::int64_t size_ = 0;
};

}  // namespace tb::data
