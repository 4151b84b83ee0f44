// GPT-2's byte-level BPE (see tokenizer.h): the vocabulary and merges files of openai/gpt-2
// (encoder.json, vocab.bpe) or Hugging Face (vocab.json, merges.txt), read as src/encoder.py of
// https://github.com/openai/gpt-2 reads them. Character classes (letters, numbers, white space)
// come from ICU (Debian's libicu-dev), as the `regex` module's \p{L}, \p{N} and \s do for GPT-2.
#include <unicode/uchar.h>
#include <unicode/utf8.h>

#include <array>
#include <fstream>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <system_error>
#include <unordered_map>
#include <utility>

#include "engine/core/error.h"
#include "engine/data/tokenizer.h"

namespace tb::data {

namespace {

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 bytes for
// U+0100 onwards, so every byte sequence is a string of printable characters.
std::array<UChar32, 256> byte_code_points() {
  std::array<UChar32, 256> cp{};
  std::array<bool, 256> printable{};
  for (int b = '!'; b <= '~'; ++b)
    printable[static_cast<std::size_t>(b)] = true;
  for (int b = 0xA1; b <= 0xAC; ++b)
    printable[static_cast<std::size_t>(b)] = true;
  for (int b = 0xAE; b <= 0xFF; ++b)
    printable[static_cast<std::size_t>(b)] = true;
  int next = 256;
  for (int b = 0; b < 256; ++b)
    cp[static_cast<std::size_t>(b)] = printable[static_cast<std::size_t>(b)] ? b : next++;
  return cp;
}

// The UTF-8 of a code point below U+0800 (GPT-2's byte symbols are U+0021..U+0143).
void append_utf8(std::string& out, UChar32 c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

enum class CharClass { kLetter, kNumber, kSpace, kOther };

CharClass class_of(UChar32 c) {
  if (c < 0) return CharClass::kOther;  // a byte that is not valid UTF-8
  if (u_hasBinaryProperty(c, UCHAR_WHITE_SPACE)) return CharClass::kSpace;
  const std::uint32_t gc = U_GET_GC_MASK(c);
  if ((gc & U_GC_L_MASK) != 0) return CharClass::kLetter;
  if ((gc & U_GC_N_MASK) != 0) return CharClass::kNumber;
  return CharClass::kOther;
}

class Gpt2BpeTokenizer final : public Tokenizer {
 public:
  Gpt2BpeTokenizer(const std::filesystem::path& vocab, const std::filesystem::path& merges)
      : vocab_path_(vocab) {
    const auto cps = byte_code_points();
    for (int b = 0; b < 256; ++b) {
      std::string s;
      append_utf8(s, cps[static_cast<std::size_t>(b)]);
      byte_symbol_[static_cast<std::size_t>(b)] = s;
      symbol_byte_[cps[static_cast<std::size_t>(b)]] = static_cast<unsigned char>(b);
    }
    read_vocab(vocab);
    read_merges(merges);
  }

  std::string describe() const override { return "gpt2-bpe " + vocab_path_.string(); }
  std::int64_t vocab() const override { return static_cast<std::int64_t>(tokens_.size()); }

  std::vector<std::int64_t> encode(std::string_view text) const override {
    std::vector<std::int64_t> ids;
    for (const auto& [begin, end] : pre_tokens(text)) {
      const std::string_view piece = text.substr(begin, end - begin);
      const std::lock_guard<std::mutex> lock(cache_mu_);
      auto it = cache_.find(std::string(piece));
      if (it == cache_.end()) it = cache_.emplace(std::string(piece), bpe(piece)).first;
      ids.insert(ids.end(), it->second.begin(), it->second.end());
    }
    return ids;
  }

  std::string decode(std::span<const std::int64_t> ids) const override {
    std::string out;
    for (const std::int64_t id : ids) {
      TB_CHECK(id >= 0 && id < vocab(), "[tokenizer] id ", id, " is outside the vocabulary 0..",
               vocab() - 1, " of ", vocab_path_.string());
      const std::string& s = tokens_[static_cast<std::size_t>(id)];
      std::int32_t i = 0;
      const auto n = static_cast<std::int32_t>(s.size());
      while (i < n) {
        UChar32 c = 0;
        U8_NEXT(s.data(), i, n, c);
        const auto it = symbol_byte_.find(c);
        TB_CHECK(it != symbol_byte_.end(), "[tokenizer] token ", id, " ('", s, "') of ",
                 vocab_path_.string(), " has a character that stands for no byte");
        out += static_cast<char>(it->second);
      }
    }
    return out;
  }

  std::vector<std::int64_t> start_ids() const override {
    const auto it = ids_.find("<|endoftext|>");
    return {it != ids_.end() ? it->second : 0};
  }

 private:
  void read_vocab(const std::filesystem::path& path) {
    std::ifstream in(path);
    TB_CHECK(in.good(), "[tokenizer] cannot open ", path.string());
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw ValueError(
          detail::str_cat("[tokenizer] ", path.string(),
                          " is not a GPT-2 vocabulary (JSON of token -> id): ", e.what()));
    }
    TB_CHECK(j.is_object() && !j.empty(), "[tokenizer] ", path.string(),
             " is not a GPT-2 vocabulary: expected a JSON object of token -> id");
    tokens_.assign(j.size(), std::string());
    std::vector<bool> seen(j.size(), false);
    for (const auto& [token, id] : j.items()) {
      TB_CHECK(id.is_number_integer() && id.get<std::int64_t>() >= 0 &&
                   id.get<std::int64_t>() < static_cast<std::int64_t>(j.size()),
               "[tokenizer] ", path.string(), ": token '", token, "' has id ", id.dump(),
               "; the ids of ", j.size(), " tokens must be 0..", j.size() - 1);
      const auto k = static_cast<std::size_t>(id.get<std::int64_t>());
      TB_CHECK(!seen[k], "[tokenizer] ", path.string(), ": id ", k, " is given to two tokens ('",
               tokens_[k], "' and '", token, "')");
      seen[k] = true;
      tokens_[k] = token;
      ids_[token] = static_cast<std::int64_t>(k);
    }
  }

  void read_merges(const std::filesystem::path& path) {
    std::ifstream in(path);
    TB_CHECK(in.good(), "[tokenizer] cannot open ", path.string());
    std::string line;
    std::int64_t line_no = 0;
    while (std::getline(in, line)) {
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
      const std::size_t sp = line.find(' ');
      TB_CHECK(sp != std::string::npos && sp > 0 && sp + 1 < line.size() &&
                   line.find(' ', sp + 1) == std::string::npos,
               "[tokenizer] ", path.string(), " line ", line_no,
               ": expected a merge 'left right' (two symbols and one space), got '", line, "'");
      ranks_.emplace(line, static_cast<std::int64_t>(ranks_.size()));
    }
  }

  // GPT-2's pre-tokeniser, the pattern
  //   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  // as byte ranges of `text`, one code point at a time (a byte that is not UTF-8 counts as a
  // character of its own, of none of the classes).
  static std::vector<std::pair<std::size_t, std::size_t>> pre_tokens(std::string_view text) {
    std::vector<UChar32> cp;
    std::vector<std::size_t> at;  // byte offset of each code point, then the end
    const auto n = static_cast<std::int32_t>(text.size());
    for (std::int32_t i = 0; i < n;) {
      at.push_back(static_cast<std::size_t>(i));
      UChar32 c = 0;
      U8_NEXT(text.data(), i, n, c);
      cp.push_back(c);
    }
    at.push_back(text.size());
    const std::size_t m = cp.size();
    std::vector<CharClass> cls(m);
    for (std::size_t i = 0; i < m; ++i)
      cls[i] = class_of(cp[i]);
    std::vector<std::pair<std::size_t, std::size_t>> out;
    std::size_t i = 0;
    const auto emit = [&](std::size_t end) {
      out.emplace_back(at[i], at[end]);
      i = end;
    };
    const auto is = [&](std::size_t k, UChar32 c) { return k < m && cp[k] == c; };
    while (i < m) {
      if (cp[i] == '\'') {  // the contractions, lower case only
        if (is(i + 1, 's') || is(i + 1, 't') || is(i + 1, 'm') || is(i + 1, 'd')) {
          emit(i + 2);
          continue;
        }
        if ((is(i + 1, 'r') && is(i + 2, 'e')) || (is(i + 1, 'v') && is(i + 2, 'e')) ||
            (is(i + 1, 'l') && is(i + 2, 'l'))) {
          emit(i + 3);
          continue;
        }
      }
      // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+": one optional space (U+0020), then a run
      // of one class.
      const std::size_t j = cp[i] == ' ' ? i + 1 : i;
      if (j < m && cls[j] != CharClass::kSpace) {
        std::size_t k = j;
        while (k < m && cls[k] == cls[j])
          ++k;
        emit(k);
        continue;
      }
      // "\s+(?!\S)|\s+": a run of white space, less its last character when a non-space follows
      // and the run is longer than one.
      std::size_t k = i;
      while (k < m && cls[k] == CharClass::kSpace)
        ++k;
      emit(k < m && k - i >= 2 ? k - 1 : k);
    }
    return out;
  }

  // The BPE of one pre-token (encoder.py's Encoder.bpe): merge the pair of lowest rank, all its
  // non-overlapping occurrences left to right, until no pair has a rank.
  std::vector<std::int64_t> bpe(std::string_view piece) const {
    std::vector<std::string> word;
    for (const char ch : piece)
      word.push_back(byte_symbol_[static_cast<unsigned char>(ch)]);
    while (word.size() > 1) {
      std::int64_t best = std::numeric_limits<std::int64_t>::max();
      std::string first, second;
      for (std::size_t i = 0; i + 1 < word.size(); ++i) {
        const auto it = ranks_.find(word[i] + ' ' + word[i + 1]);
        if (it != ranks_.end() && it->second < best) {
          best = it->second;
          first = word[i];
          second = word[i + 1];
        }
      }
      if (best == std::numeric_limits<std::int64_t>::max()) break;
      std::vector<std::string> merged;
      for (std::size_t i = 0; i < word.size();) {
        if (i + 1 < word.size() && word[i] == first && word[i + 1] == second) {
          merged.push_back(first + second);
          i += 2;
        } else {
          merged.push_back(word[i]);
          i += 1;
        }
      }
      word = std::move(merged);
    }
    std::vector<std::int64_t> ids;
    ids.reserve(word.size());
    for (const auto& s : word) {
      const auto it = ids_.find(s);
      TB_CHECK(it != ids_.end(), "[tokenizer] ", vocab_path_.string(), " has no token '", s,
               "' (a symbol its merges make)");
      ids.push_back(it->second);
    }
    return ids;
  }

  std::filesystem::path vocab_path_;
  std::vector<std::string> tokens_;                      // id -> token
  std::unordered_map<std::string, std::int64_t> ids_;    // token -> id
  std::unordered_map<std::string, std::int64_t> ranks_;  // "left right" -> merge rank
  std::array<std::string, 256> byte_symbol_;
  std::unordered_map<UChar32, unsigned char> symbol_byte_;
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<std::int64_t>> cache_;
};

}  // namespace

std::filesystem::path gpt2_merges_beside(const std::filesystem::path& vocab) {
  std::error_code ec;
  for (const char* name : {"merges.txt", "vocab.bpe"}) {
    const auto p = vocab.parent_path() / name;
    if (std::filesystem::is_regular_file(p, ec)) return p;
  }
  throw ValueError(detail::str_cat("[tokenizer] no merges.txt or vocab.bpe beside ", vocab.string(),
                                   " (GPT-2's BPE needs its merges file in the same folder)"));
}

std::shared_ptr<const Tokenizer> read_gpt2_bpe(const std::filesystem::path& vocab,
                                               const std::filesystem::path& merges) {
  return std::make_shared<const Gpt2BpeTokenizer>(vocab, merges);
}

}  // namespace tb::data
