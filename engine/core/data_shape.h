// DataShape: what a data set hands a model, so that a model kind can check, before a run starts,
// that it fits the data (an mlp's input width, a language model's context length).
#pragma once

#include <cstdint>
#include <string>

namespace tb::core {

/// The task a data set poses and a model kind solves.
inline constexpr const char* kTaskClassification = "classification";  ///< sample -> class
inline constexpr const char* kTaskLanguageModel = "language-model";   ///< tokens -> next tokens

/// The shape of a data set's samples as far as the config tells (0 = not known up front).
struct DataShape {
  std::string kind;                 ///< data.kind, for messages
  std::string task;                 ///< kTaskClassification or kTaskLanguageModel
  std::int64_t features = 0;        ///< classification: input features per sample
  std::string features_note;        ///< how the data set explains them ("28x28 pixels")
  std::int64_t classes = 0;         ///< classification: number of labels
  std::int64_t context_length = 0;  ///< language model: tokens per sample
  std::int64_t vocab = 0;           ///< language model: token ids are below this (0: not known yet)
  std::string vocab_note;           ///< where that vocabulary comes from ("data.vocab = 50257")
};

}  // namespace tb::core
