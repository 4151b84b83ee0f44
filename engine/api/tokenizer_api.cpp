// Tokenizers for the front ends (see tokenizer_api.h).
#include "engine/api/tokenizer_api.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "engine/core/error.h"
#include "engine/data/text_dataset.h"
#include "engine/data/token_file.h"
#include "engine/data/tokenizer.h"

namespace tb::api {

std::string train_tokenizer(const TokenizerTrainRequest& r) {
  const data::TextCorpus corpus =
      r.text.empty() ? data::load_text_corpus() : data::load_text_corpus(r.text);
  data::SentencePieceTrainOptions o;
  o.model_prefix = r.output;
  o.vocab_size = r.vocab_size;
  o.model_type = r.model_type;
  o.character_coverage = r.character_coverage;
  o.max_lines = r.max_lines;
  const auto model = data::train_sentencepiece(corpus, o);
  const auto tok = data::load_sentencepiece(model);
  const auto ids = data::encode_corpus_lines(*tok, corpus);
  std::ostringstream os;
  os << "wrote " << model.string() << ": " << tok->vocab() << " pieces (" << r.model_type
     << ") from " << corpus.source << "; the text is " << ids.size() << " pieces for "
     << corpus.size() << " bytes ("
     << static_cast<double>(corpus.size()) / static_cast<double>(ids.empty() ? 1 : ids.size())
     << " bytes a piece)\n"
     << "use it with [data] kind = \"text\", tokenizer = \"sentencepiece\", tokenizer_model = \""
     << model.string() << "\"\n";
  return os.str();
}

namespace {

// GPT-2's vocabulary is JSON (vocab.json, encoder.json); anything else a SentencePiece model.
std::shared_ptr<const data::Tokenizer> load_tokenizer(const std::string& model) {
  return std::filesystem::path(model).extension() == ".json" ? data::load_gpt2_bpe(model)
                                                             : data::load_sentencepiece(model);
}

}  // namespace

std::string encode_token_file(const TokenFileRequest& r) {
  TB_CHECK(!r.input.empty(), "[tokenizer] --input: give the text file or folder to encode");
  TB_CHECK(!r.output.empty(), "[tokenizer] -o: give the token file to write");
  const auto tok = load_tokenizer(r.model);
  const bool gpt2 = tok->describe().rfind("gpt2-bpe", 0) == 0;
  TB_CHECK(tok->vocab() <= 65536, "[tokenizer] ", tok->describe(), " has ", tok->vocab(),
           " ids: a token file holds uint16 ids (at most 65536)");
  const data::TextCorpus corpus = data::load_text_corpus(r.input);
  std::vector<std::uint16_t> ids;
  for (const auto& file : corpus.files) {
    std::ifstream in(file, std::ios::binary | std::ios::ate);
    const std::streamoff size = in.is_open() ? static_cast<std::streamoff>(in.tellg()) : -1;
    TB_CHECK(size >= 0, "[tokenizer] ", file.string(), ": cannot be read");
    std::string text(static_cast<std::size_t>(size), '\0');
    in.seekg(0);
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    TB_CHECK(in.good() || text.empty(), "[tokenizer] ", file.string(), ": read error");
    std::vector<std::int64_t> doc = gpt2 ? tok->start_ids() : std::vector<std::int64_t>{};
    const auto body = tok->encode(text);
    doc.insert(doc.end(), body.begin(), body.end());
    for (const std::int64_t id : doc)
      ids.push_back(static_cast<std::uint16_t>(id));
    TB_CHECK(ids.size() <= static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()),
             "[tokenizer] ", corpus.source, ": more than 2^31 - 1 tokens; split the text");
  }
  TB_CHECK(!ids.empty(), "[tokenizer] ", corpus.source, ": no text to encode");
  // Written next to its place and renamed over it: whole or not at all.
  const std::filesystem::path out = r.output;
  std::error_code is_dir;
  TB_CHECK(!std::filesystem::is_directory(out, is_dir), "[tokenizer] -o ", out.string(),
           ": is a folder; give the token file to write (e.g. ", (out / "train.bin").string(), ")");
  const std::filesystem::path tmp =
      out.string() + ".tmp-" + std::to_string(static_cast<long>(::getpid()));
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    TB_CHECK(f.good(), "[tokenizer] ", out.string(), ": cannot write (", std::strerror(errno),
             ", writing ", tmp.string(), ")");
    // Little-endian, as llm.c writes it (and as this machine stores it).
    static_assert(std::endian::native == std::endian::little);
    if (!r.raw) {
      std::array<std::int32_t, data::kLlmcHeaderBytes / 4> header{};
      header[0] = data::kLlmcMagicGpt2;
      header[1] = 1;
      header[2] = static_cast<std::int32_t>(ids.size());
      f.write(reinterpret_cast<const char*>(header.data()), data::kLlmcHeaderBytes);
    }
    f.write(reinterpret_cast<const char*>(ids.data()),
            static_cast<std::streamsize>(ids.size() * sizeof(std::uint16_t)));
    f.flush();
    if (!f.good()) {
      f.close();
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      throw ValueError("[tokenizer] " + out.string() + ": write failed (a full disk?)");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, out, ec);
  if (ec) {
    const std::string why = ec.message();  // before remove() reuses ec
    std::filesystem::remove(tmp, ec);
    throw ValueError("[tokenizer] " + out.string() + ": cannot write: " + why);
  }
  std::ostringstream os;
  os << "wrote " << out.string() << ": " << ids.size() << " tokens of " << tok->describe()
     << " from " << corpus.files.size() << (corpus.files.size() == 1 ? " file" : " files") << " ("
     << corpus.size() << " bytes) of " << corpus.source
     << (gpt2 ? ", each after <|endoftext|>" : "") << ", as "
     << (r.raw ? "raw uint16 ids (nanoGPT's)" : "llm.c's .bin (header, uint16 ids)") << "\n"
     << "use it with [data] kind = \"tokens\", path = \"" << out.string() << "\"";
  // The tokens kind's vocabulary is GPT-2's unless said; text comes back through GPT-2's BPE.
  if (tok->vocab() != 50257) os << ", vocab = " << tok->vocab();
  if (gpt2)
    os << ", tokenizer = \"gpt2\", tokenizer_model = \""
       << std::filesystem::absolute(r.model).string() << "\"";
  os << " (data.val_fraction holds out its end), and model.vocab = " << tok->vocab();
  if (!gpt2) os << " (samples come back as ids: the tokens kind decodes GPT-2's BPE only)";
  os << "\n";
  return os.str();
}

std::string encode_text(const std::string& model, const std::string& text) {
  const auto tok = load_tokenizer(model);
  const auto ids = tok->encode(text);
  std::ostringstream os;
  os << ids.size() << " pieces of " << tok->describe() << " (vocabulary " << tok->vocab() << "):\n";
  for (std::size_t i = 0; i < ids.size(); ++i)
    os << (i ? " " : "") << ids[i];
  os << "\ndecoded: " << tok->decode(ids) << "\n";
  return os.str();
}

}  // namespace tb::api
