// Byte and SentencePiece tokenizers (see tokenizer.h).
#include "engine/data/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <system_error>
#include <unordered_map>
#include <utility>

#include "engine/core/error.h"
#include "engine/core/file_write.h"
#include "engine/core/thread_pool.h"

namespace tb::data {

namespace {

class ByteTokenizer final : public Tokenizer {
 public:
  std::string describe() const override { return "bytes"; }
  std::int64_t vocab() const override { return kByteVocabSize; }
  std::vector<std::int64_t> encode(std::string_view text) const override {
    std::vector<std::int64_t> ids;
    ids.reserve(text.size());
    for (const char c : text)
      ids.push_back(static_cast<unsigned char>(c));
    return ids;
  }
  std::string decode(std::span<const std::int64_t> ids) const override {
    std::string text;
    text.reserve(ids.size());
    for (const std::int64_t id : ids) {
      TB_CHECK(id >= 0 && id < kByteVocabSize, "[tokenizer] id ", id,
               " is not a byte (bytes: 0..255)");
      text += static_cast<char>(id);
    }
    return text;
  }
  std::vector<std::int64_t> start_ids() const override { return {'\n'}; }
};

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::filesystem::path& model) : path_(model) {
    std::error_code ec;
    TB_CHECK(std::filesystem::is_regular_file(model, ec), "[tokenizer] cannot open ",
             model.string(), ": no such file");
    sentencepiece::util::Status status;
    try {
      status = sp_.Load(model.string());
    } catch (const std::exception& e) {
      // The library indexes the pieces with darts-clone, which throws where a piece cannot be a
      // key (one that starts with a NUL byte: "failed to insert key: zero-length key"); its
      // message names its own header and line.
      std::string why = e.what();
      if (const auto at = why.find("exception: "); at != std::string::npos)
        why = why.substr(at + 11);
      throw ValueError(detail::str_cat("[tokenizer] ", model.string(),
                                       " is not a SentencePiece model (its pieces cannot be "
                                       "indexed: ",
                                       why, ")"));
    }
    if (!status.ok()) {
      // The library's parse failure names its own source line; said as what it means.
      std::string why = status.ToString();
      if (why.find("ParseFromArray") != std::string::npos)
        why =
            "its bytes do not parse as a SentencePiece ModelProto: a truncated file, or "
            "another kind of file";
      else if (why.rfind("Internal: ", 0) == 0)
        why = why.substr(10);
      throw ValueError(detail::str_cat("[tokenizer] ", model.string(),
                                       " is not a SentencePiece model (", why, ")"));
    }
    TB_CHECK(sp_.GetPieceSize() > 0, "[tokenizer] ", model.string(), " has no pieces");
  }
  std::string describe() const override { return "sentencepiece " + path_.string(); }
  std::int64_t vocab() const override { return sp_.GetPieceSize(); }
  std::vector<std::int64_t> encode(std::string_view text) const override {
    std::vector<int> ids;
    const auto status = sp_.Encode(text, &ids);
    TB_CHECK(status.ok(), "[tokenizer] ", path_.string(), ": cannot encode text (",
             status.ToString(), ")");
    return {ids.begin(), ids.end()};
  }
  std::string decode(std::span<const std::int64_t> ids) const override {
    std::vector<int> v;
    v.reserve(ids.size());
    for (const std::int64_t id : ids) {
      TB_CHECK(id >= 0 && id < vocab(), "[tokenizer] id ", id, " is outside the vocabulary 0..",
               vocab() - 1, " of ", path_.string());
      v.push_back(static_cast<int>(id));
    }
    std::string text;
    const auto status = sp_.Decode(v, &text);
    TB_CHECK(status.ok(), "[tokenizer] ", path_.string(), ": cannot decode ids (",
             status.ToString(), ")");
    return text;
  }
  std::vector<std::int64_t> start_ids() const override {
    const int word = sp_.PieceToId("\xe2\x96\x81");  // U+2581, SentencePiece's word start
    if (word != sp_.unk_id()) return {word};
    return {sp_.bos_id() >= 0 ? sp_.bos_id() : 0};
  }

 private:
  std::filesystem::path path_;
  sentencepiece::SentencePieceProcessor sp_;
};

// SentencePiece's trainer skips longer sentences (its max_sentence_length default); they are
// left out here, so that a corpus of only long lines is an error that says so.
constexpr std::size_t kMaxSentenceBytes = 4192;

// Feeds a corpus's non-empty lines to SentencePiece's trainer (at most `max` lines, 0 = all;
// spread evenly over the corpus when there are more).
class CorpusLines final : public sentencepiece::SentenceIterator {
 public:
  CorpusLines(const TextCorpus& corpus, std::int64_t max) {
    const auto& b = *corpus.bytes;
    std::size_t start = 0;
    for (std::size_t i = 0; i <= b.size(); ++i) {
      if (i == b.size() || b[i] == '\n') {
        if (i - start > kMaxSentenceBytes) {
          ++too_long_;
        } else if (i > start) {
          lines_.emplace_back(start, i - start);
        }
        start = i + 1;
      }
    }
    bytes_ = corpus.bytes;
    const auto n = static_cast<std::int64_t>(lines_.size());
    step_ = max > 0 && n > max ? static_cast<double>(n) / static_cast<double>(max) : 1.0;
    count_ = max > 0 && n > max ? max : n;
    set();
  }
  bool done() const override { return k_ >= count_; }
  std::int64_t too_long() const { return too_long_; }  ///< lines left out for their length
  void Next() override {
    ++k_;
    set();
  }
  const std::string& value() const override { return value_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  void set() {
    if (done()) return;
    const auto& [off, len] = lines_[static_cast<std::size_t>(static_cast<double>(k_) * step_)];
    value_.assign(reinterpret_cast<const char*>(bytes_->data()) + off, len);
  }
  std::shared_ptr<const std::vector<std::uint8_t>> bytes_;
  std::vector<std::pair<std::size_t, std::size_t>> lines_;
  double step_ = 1.0;
  std::int64_t count_ = 0;
  std::int64_t k_ = 0;
  std::int64_t too_long_ = 0;
  std::string value_;
};

}  // namespace

std::shared_ptr<const Tokenizer> byte_tokenizer() {
  static const auto bytes = std::make_shared<const ByteTokenizer>();
  return bytes;
}

namespace {

// One tokenizer per file path and modification time (config checks ask for a model's vocabulary
// again and again; an edited file is read again).
std::shared_ptr<const Tokenizer> cached(
    const std::filesystem::path& file,
    const std::function<std::shared_ptr<const Tokenizer>()>& make) {
  static std::mutex mu;
  static std::map<std::pair<std::string, std::filesystem::file_time_type>,
                  std::shared_ptr<const Tokenizer>>
      cache;
  std::error_code ec;
  const auto mtime = std::filesystem::last_write_time(file, ec);
  TB_CHECK(!ec, "[tokenizer] cannot open ", file.string(), ": ", ec.message());
  const std::lock_guard<std::mutex> lock(mu);
  auto& slot = cache[{file.string(), mtime}];
  if (!slot) slot = make();
  return slot;
}

}  // namespace

std::shared_ptr<const Tokenizer> load_sentencepiece(const std::filesystem::path& model) {
  return cached(model, [&] { return std::make_shared<const SentencePieceTokenizer>(model); });
}

std::shared_ptr<const Tokenizer> load_gpt2_bpe(const std::filesystem::path& vocab) {
  std::error_code ec;
  TB_CHECK(std::filesystem::is_regular_file(vocab, ec), "[tokenizer] cannot open ", vocab.string(),
           ": no such file");
  const auto merges = gpt2_merges_beside(vocab);
  return cached(vocab, [&] { return read_gpt2_bpe(vocab, merges); });
}

std::vector<std::int32_t> encode_corpus_lines(const Tokenizer& tokenizer,
                                              const TextCorpus& corpus) {
  const auto& b = *corpus.bytes;
  const auto* text = reinterpret_cast<const char*>(b.data());
  // The non-empty lines, then blocks of them encoded on the kernel pool (encode is const and
  // thread-safe) and joined in line order: the ids do not depend on the thread count. The
  // fortunes corpus (~1.7 M pieces) took about a third of a second on one thread.
  std::vector<std::string_view> lines;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= b.size(); ++i) {
    if (i < b.size() && b[i] != '\n') continue;
    if (i > start) lines.emplace_back(text + start, i - start);
    start = i + 1;
  }
  constexpr std::size_t kLinesPerBlock = 512;
  const std::size_t blocks = (lines.size() + kLinesPerBlock - 1) / kLinesPerBlock;
  std::vector<std::vector<std::int32_t>> parts(blocks);
  core::parallel_for(
      0, static_cast<std::int64_t>(blocks), 1, [&](std::int64_t lo, std::int64_t hi) {
        for (auto k = static_cast<std::size_t>(lo); k < static_cast<std::size_t>(hi); ++k) {
          const std::size_t end = std::min(lines.size(), (k + 1) * kLinesPerBlock);
          for (std::size_t l = k * kLinesPerBlock; l < end; ++l)
            for (const std::int64_t id : tokenizer.encode(lines[l]))
              parts[k].push_back(static_cast<std::int32_t>(id));
        }
      });
  std::size_t total = 0;
  for (const auto& part : parts)
    total += part.size();
  std::vector<std::int32_t> ids;
  ids.reserve(total);
  for (const auto& part : parts)
    ids.insert(ids.end(), part.begin(), part.end());
  return ids;
}

namespace {
// The .model and .vocab as a pair: both written beside their places first, then both renamed
// over them, so a failure leaves neither new file beside an old or missing other.
void write_model_and_vocab(const std::filesystem::path& model, const std::string& proto,
                           const std::filesystem::path& vocab, const std::string& pieces) {
  const std::filesystem::path model_tmp = core::write_beside(model, proto, "tokenizer");
  try {
    const std::filesystem::path vocab_tmp = core::write_beside(vocab, pieces, "tokenizer");
    core::put_in_place(model_tmp, model, "tokenizer");
    core::put_in_place(vocab_tmp, vocab, "tokenizer");
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove(model_tmp, ec);
    std::filesystem::remove(vocab.string() + ".tmp", ec);
    throw;
  }
}
}  // namespace

std::filesystem::path train_sentencepiece(const TextCorpus& corpus,
                                          const SentencePieceTrainOptions& o) {
  TB_CHECK(!o.model_prefix.empty(), "[tokenizer] the model prefix (-o) is empty");
  TB_CHECK(o.vocab_size >= 8, "[tokenizer] vocab_size must be >= 8, got ", o.vocab_size);
  TB_CHECK(o.model_type == "unigram" || o.model_type == "bpe" || o.model_type == "char" ||
               o.model_type == "word",
           "[tokenizer] model_type must be one of unigram, bpe, char, word, got '", o.model_type,
           "'");
  TB_CHECK(o.character_coverage > 0.0 && o.character_coverage <= 1.0,
           "[tokenizer] character_coverage must be in (0, 1], got ", o.character_coverage);
  TB_CHECK(o.max_lines >= 0, "[tokenizer] max_lines must be >= 0, got ", o.max_lines);
  // The output folder is checked before the training (seconds to minutes), not after it.
  {
    // "-o tok/" (a folder) wrote tok/.model and tok/.vocab, hidden.
    std::error_code is_dir;
    TB_CHECK(
        o.model_prefix.has_filename() && !std::filesystem::is_directory(o.model_prefix, is_dir),
        "[tokenizer] -o ", o.model_prefix.string(),
        ": is a folder; give the name the files start with (PREFIX.model and PREFIX.vocab "
        "are written, e.g. -o ",
        (o.model_prefix / "tok").lexically_normal().string(), ")");
    const std::filesystem::path folder = o.model_prefix.has_parent_path()
                                             ? o.model_prefix.parent_path()
                                             : std::filesystem::path(".");
    std::error_code ec;
    TB_CHECK(std::filesystem::is_directory(folder, ec), "[tokenizer] -o ", o.model_prefix.string(),
             ": the folder ", folder.string(), " does not exist");
    TB_CHECK(access(folder.c_str(), W_OK) == 0, "[tokenizer] -o ", o.model_prefix.string(),
             ": the folder ", folder.string(), " is not writable");
  }
  CorpusLines lines(corpus, o.max_lines);
  TB_CHECK(lines.too_long() == 0 || !lines.done(), "[tokenizer] ", corpus.source,
           ": every non-empty line is longer than ", kMaxSentenceBytes,
           " bytes, the longest sentence SentencePiece trains on; break the text into lines");
  TB_CHECK(!lines.done(), "[tokenizer] ", corpus.source, " has no non-empty line to train on");
  const std::unordered_map<std::string, std::string> args = {
      {"vocab_size", std::to_string(o.vocab_size)},
      {"model_type", o.model_type},
      {"character_coverage", std::to_string(o.character_coverage)},
      {"max_sentence_length", std::to_string(kMaxSentenceBytes)},
      {"num_threads", "1"},  // the same model on every machine
      {"minloglevel", "2"},  // warnings and errors only
  };
  // The model comes back in memory and is written here, whole or not at all: SentencePiece's
  // own writer reported success on a full disk and left a cut .model and an empty .vocab.
  std::string proto;
  const auto status = sentencepiece::SentencePieceTrainer::Train(args, &lines, &proto);
  TB_CHECK(status.ok(), "[tokenizer] training on ", corpus.source, " failed: ", status.ToString());
  sentencepiece::SentencePieceProcessor trained;
  const auto loaded = trained.LoadFromSerializedProto(proto);
  TB_CHECK(loaded.ok(), "[tokenizer] training on ", corpus.source,
           " gave no readable model: ", loaded.ToString());
  // The .vocab beside it, as SentencePiece writes it: each piece and its score, in id order.
  std::string vocab;
  char score[32];
  for (int id = 0; id < trained.GetPieceSize(); ++id) {
    std::snprintf(score, sizeof score, "%g", static_cast<double>(trained.GetScore(id)));
    vocab += trained.IdToPiece(id) + "\t" + score + "\n";
  }
  const std::filesystem::path model = o.model_prefix.string() + ".model";
  write_model_and_vocab(model, proto, o.model_prefix.string() + ".vocab", vocab);
  return model;
}

// The length of the well-formed UTF-8 sequence at s[i] (Unicode's table 3-7: no overlong forms,
// no surrogates, nothing beyond U+10FFFF), 0 when there is none.
namespace {
std::size_t utf8_sequence(std::string_view s, std::size_t i) {
  const auto at = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b = at(i);
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (b >= 0xC2 && b <= 0xDF) {
    n = 2;
  } else if (b >= 0xE0 && b <= 0xEF) {
    n = 3;
    if (b == 0xE0) lo = 0xA0;
    if (b == 0xED) hi = 0x9F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    n = 4;
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > s.size() || at(i + 1) < lo || at(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k)
    if (at(i + k) < 0x80 || at(i + k) > 0xBF) return 0;
  return n;
}
}  // namespace

std::string printable_line(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      if (c == '\n')
        out += "\\n";
      else if (c == '\t')
        out += "\\t";
      else if (c < 32 || c == 127)
        out += '?';
      else
        out += static_cast<char>(c);
      ++i;
      continue;
    }
    const std::size_t n = utf8_sequence(text, i);
    if (n == 0) {
      out += '?';
      ++i;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  return out;
}

}  // namespace tb::data
