// Fuzz targets, one per input parser: each takes arbitrary bytes, feeds them to the parser as a
// user would (a file on disk where the parser reads files), and returns normally when the parser
// either accepts the input or rejects it with a tb::Error (a clear message). Anything else —
// another exception type, a crash, a sanitizer report — is a finding. Used by the libFuzzer
// binaries (fuzz_main.cpp, clang preset `fuzz`) and by the corpus replay test (replay_test.cpp)
// in every normal test run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tb::fuzz {

/// A TOML run config; bytes after the first NUL are `--set` overrides, one per line.
void run_config(const std::uint8_t* data, std::size_t size);
/// A safetensors file (checkpoint weights).
void safetensors(const std::uint8_t* data, std::size_t size);
/// An IDX file (Fashion-MNIST images, 3 dimensions).
void idx(const std::uint8_t* data, std::size_t size);
/// A CIFAR binary batch (parsed as CIFAR-10 and as CIFAR-100), then a batch of its images.
void cifar(const std::uint8_t* data, std::size_t size);
/// A token file (llm.c .bin or raw uint16, format auto), then its first windows.
void tokens(const std::uint8_t* data, std::size_t size);
/// An image file (PNG, JPEG) decoded as grey and as RGB, then resized.
void image(const std::uint8_t* data, std::size_t size);
/// GPT-2's BPE files: vocab.json, a NUL byte, merges.txt; then a text (the input's bytes) encoded
/// and decoded back, which must give the text again.
void gpt2_bpe(const std::uint8_t* data, std::size_t size);
/// A SentencePiece model file; then a text encoded and decoded back, which must give it again
/// (SentencePiece normalises: NFKC, whitespace), and ids decoded.
void sentencepiece(const std::uint8_t* data, std::size_t size);
/// A weights file (safetensors) loaded into a tiny `gpt` model, as `run.init_from` does: with
/// its own names or GPT-2's (Hugging Face, nanoGPT), Conv1D layout, a padded table; the model
/// must be left untouched when the file is refused.
void weights(const std::uint8_t* data, std::size_t size);
/// A scheduler lambda expression, then evaluated at a few epochs.
void lr_lambda(const std::uint8_t* data, std::size_t size);
/// A run database file opened by the store.
void store(const std::uint8_t* data, std::size_t size);

/// The targets by name ("run_config", ...), for the replay test and the fuzzers.
using Target = void (*)(const std::uint8_t*, std::size_t);
struct NamedTarget {
  const char* name;
  Target fn;
};
/// Every target.
const std::vector<NamedTarget>& targets();

}  // namespace tb::fuzz
