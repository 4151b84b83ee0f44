// Tokenizers for the front ends (see tokenizer_api.h).
#include "engine/api/tokenizer_api.h"

#include <filesystem>
#include <sstream>

#include "engine/data/text_dataset.h"
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

std::string encode_text(const std::string& model, const std::string& text) {
  // GPT-2's vocabulary is JSON (vocab.json, encoder.json); anything else a SentencePiece model.
  const auto tok = std::filesystem::path(model).extension() == ".json"
                       ? data::load_gpt2_bpe(model)
                       : data::load_sentencepiece(model);
  const auto ids = tok->encode(text);
  std::ostringstream os;
  os << ids.size() << " pieces of " << tok->describe() << " (vocabulary " << tok->vocab() << "):\n";
  for (std::size_t i = 0; i < ids.size(); ++i)
    os << (i ? " " : "") << ids[i];
  os << "\ndecoded: " << tok->decode(ids) << "\n";
  return os.str();
}

}  // namespace tb::api
