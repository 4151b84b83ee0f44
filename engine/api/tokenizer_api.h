// Tokenizers for the front ends: `trainbench-cli tokenizer train` (a SentencePiece model from a
// text file or folder) and `tokenizer encode` (how a model splits a text, or a text file or
// folder made into a token file).
#pragma once

#include <cstdint>
#include <string>

namespace tb::api {

/// What `trainbench-cli tokenizer train` asks for.
struct TokenizerTrainRequest {
  std::string text;                    ///< text file or folder ("" = Debian's fortunes)
  std::string output;                  ///< model prefix: writes OUTPUT.model and OUTPUT.vocab
  std::int64_t vocab_size = 1000;      ///< pieces, the special ones included
  std::string model_type = "unigram";  ///< unigram | bpe | char | word
  double character_coverage = 1.0;     ///< characters covered (0.9995 for CJK text)
  std::int64_t max_lines = 1000000;    ///< lines taken, evenly spaced (0 = all)
};

/// Trains a SentencePiece model on the request's text; returns a report ("wrote m.model: 1000
/// pieces, unigram, from 9,871 lines of ..."). Errors name the option or the trainer's reason.
std::string train_tokenizer(const TokenizerTrainRequest& request);

/// The ids of `text` under `model` — a SentencePiece .model file, or GPT-2's vocab.json /
/// encoder.json (any .json: its byte-level BPE) — and the text decoded back.
std::string encode_text(const std::string& model, const std::string& text);

/// What `trainbench-cli tokenizer encode MODEL --input TEXT -o FILE` asks for.
struct TokenFileRequest {
  std::string model;   ///< as encode_text's
  std::string input;   ///< a text file, or a folder of them (read as the text data kind reads)
  std::string output;  ///< the token file to write
  bool raw = false;    ///< nanoGPT's raw uint16 tokens instead of llm.c's .bin (with a header)
};

/// Encodes a text file or folder into a token file for `[data] kind = "tokens"`: each file one
/// document, preceded by <|endoftext|> under GPT-2's BPE (as llm.c's and nanoGPT's prepare
/// scripts do); written as llm.c's format (a 1024-byte header: magic 20240520, version 1, the
/// count; then uint16 ids) or, with `raw`, bare uint16 ids. Written whole or not at all (a
/// temporary file renamed). Returns a report; ids beyond 65535 (a larger vocabulary) or more
/// than 2^31 - 1 tokens are a tb::ValueError.
std::string encode_token_file(const TokenFileRequest& request);

}  // namespace tb::api
