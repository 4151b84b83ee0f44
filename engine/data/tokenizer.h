// Tokenizers of the language-model data kinds: bytes (the text kind's default) and SentencePiece
// models (Kudo & Richardson, 2018; github.com/google/sentencepiece, Debian's
// libsentencepiece-dev) — the `.model` files of T5, Llama 1/2, Gemma and those trained with
// `spm_train` or `trainbench-cli tokenizer train`. The data kind encodes its text with one; the
// sampler encodes prompts and decodes what a model generates with the same one.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/data/text_dataset.h"

namespace tb::data {

/// Text to token ids and back.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  /// "bytes", "sentencepiece <model file>" or "gpt2-bpe <vocabulary file>" (for messages).
  virtual std::string describe() const = 0;
  /// Number of ids: every id is in [0, vocab()).
  virtual std::int64_t vocab() const = 0;
  /// The ids of `text`.
  virtual std::vector<std::int64_t> encode(std::string_view text) const = 0;
  /// The text of `ids`; an id outside the vocabulary is a tb::ValueError naming it.
  virtual std::string decode(std::span<const std::int64_t> ids) const = 0;
  /// Where generation starts without a prompt: a line break (bytes), SentencePiece's word-start
  /// piece "▁" (else its beginning-of-sentence id, else id 0), GPT-2's <|endoftext|>.
  virtual std::vector<std::int64_t> start_ids() const = 0;
};

/// The byte tokenizer: id = byte value, vocabulary 256.
std::shared_ptr<const Tokenizer> byte_tokenizer();

/// Decoded text as one printable line of valid UTF-8 (for events, logs and JSON): well-formed
/// UTF-8 sequences kept, line breaks and tabs written as \n and \t, other control characters
/// and every byte that does not start or continue a well-formed sequence (a byte model's draws
/// need not be UTF-8) as '?'.
std::string printable_line(std::string_view text);

/// A SentencePiece model read from `model` (cached per path and modification time, so config
/// checks that ask for its vocabulary do not re-read it). Throws tb::ValueError naming the file
/// when it is missing or not a SentencePiece model.
std::shared_ptr<const Tokenizer> load_sentencepiece(const std::filesystem::path& model);

/// GPT-2's byte-level BPE from its vocabulary file `vocab` (Hugging Face's vocab.json or
/// openai/gpt-2's encoder.json: token -> id) and the merges file beside it (merges.txt or
/// vocab.bpe), as openai/gpt-2's src/encoder.py reads them: GPT-2's pre-tokenising pattern (its
/// \p{L}, \p{N} and \s from ICU), then the merges by rank. Generation starts from
/// <|endoftext|>. Cached per path and modification time. Throws tb::ValueError naming the file
/// (and line) when a file is missing or malformed.
std::shared_ptr<const Tokenizer> load_gpt2_bpe(const std::filesystem::path& vocab);

/// GPT-2's byte-level BPE from explicit vocabulary and merges files, read every time (no cache).
std::shared_ptr<const Tokenizer> read_gpt2_bpe(const std::filesystem::path& vocab,
                                               const std::filesystem::path& merges);

/// The merges file beside a GPT-2 vocabulary file: merges.txt, else vocab.bpe; a
/// tb::ValueError when there is neither.
std::filesystem::path gpt2_merges_beside(const std::filesystem::path& vocab);

/// The ids of a corpus under a SentencePiece tokenizer: each line encoded on its own (a line break
/// becomes a word boundary, as SentencePiece's own training reads lines), empty lines skipped.
std::vector<std::int32_t> encode_corpus_lines(const Tokenizer& tokenizer, const TextCorpus& corpus);

/// What `trainbench-cli tokenizer train` asks of SentencePiece's trainer.
struct SentencePieceTrainOptions {
  std::filesystem::path model_prefix;  ///< writes PREFIX.model and PREFIX.vocab
  std::int64_t vocab_size = 1000;      ///< pieces, the four special ones included
  std::string model_type = "unigram";  ///< unigram | bpe | char | word
  double character_coverage = 1.0;     ///< 0.9995 for languages with large alphabets
  std::int64_t max_lines = 1000000;    ///< lines taken, evenly spaced over the corpus (0 = all)
};

/// Trains a SentencePiece model on the lines of `corpus`; returns the .model file's path.
/// Throws tb::ValueError with the trainer's message (e.g. a vocabulary larger than the text
/// supports) or for options out of range.
std::filesystem::path train_sentencepiece(const TextCorpus& corpus,
                                          const SentencePieceTrainOptions& options);

}  // namespace tb::data
