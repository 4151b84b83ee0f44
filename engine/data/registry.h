// The data-set registry: one entry per data kind (the run config's data.kind) with its task, the
// sample shape it promises, its own fields and its factory (train and eval splits). The config
// reader and writer, the trainer, the GUI form and the config reference walk it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/core/data_shape.h"
#include "engine/core/fields.h"
#include "engine/core/registry.h"
#include "engine/data/dataset.h"
#include "engine/data/tokenizer.h"

namespace tb::data {

/// A data set's two splits.
struct DataSplits {
  std::shared_ptr<Dataset> train;  ///< what the loader draws batches from
  std::shared_ptr<Dataset> eval;   ///< what evaluation reads in order
  /// What was read, for the run's events: the files a pattern matched, images per class, files
  /// left out.
  std::vector<std::string> notes;
  /// What looks wrong but is allowed, for the run's warnings (a validation file that is also
  /// one of the training files).
  std::vector<std::string> warnings;
};

/// One data kind. Its factory and shape get the whole [data] table as JSON: the loader keys
/// every kind shares (path, batch_size, workers, shuffle, drop_last, context_length,
/// val_fraction, normalize) and the kind's own `fields`.
struct DatasetKind {
  std::string name;                     ///< data.kind ("fashion-mnist")
  std::string help;                     ///< one line for the GUI and the reference
  std::string task;                     ///< core::kTaskClassification or kTaskLanguageModel
  std::vector<core::FieldSpec> fields;  ///< keys of its own, after the shared ones
  /// The shared [data] keys it reads besides batch_size, workers, shuffle and drop_last (which
  /// every kind's loader reads): of path, context_length, val_fraction, normalize. The
  /// workbench greys the others for this kind.
  std::vector<std::string> reads;
  /// What data.path must name when the kind has no default location ("" = it has one: an empty
  /// data.path is then that default). An empty data.path is a config error saying this.
  std::string path_required;
  /// What its samples look like, from the [data] table (no file is read).
  std::function<core::DataShape(const nlohmann::json&)> shape;
  /// Loads or makes the splits; `seed` is run.seed (synthetic data is drawn from it).
  std::function<DataSplits(const nlohmann::json&, std::uint64_t seed)> make;
  /// Optional: the training split's sample count read cheaply (a header, not the data), for
  /// previews that need steps per epoch; train_samples() falls back to make() without it.
  std::function<std::int64_t(const nlohmann::json&, std::uint64_t seed)> train_size;
  /// Optional: checks across the kind's fields beyond each field's own bounds, run with the
  /// config (before a run is created); a problem names the field, relative to [data].
  std::function<std::optional<core::FieldProblem>(const nlohmann::json&)> validate;
  /// Optional, language-model kinds: the tokenizer that turns the kind's text into its ids
  /// (bytes, a SentencePiece model), used to encode prompts and show generated text. Absent or
  /// returning null: the ids have no known text form (token files).
  std::function<std::shared_ptr<const Tokenizer>(const nlohmann::json&)> tokenizer;
};

/// The tokenizer of `kind` for the [data] table `settings`, or null (see DatasetKind::tokenizer).
std::shared_ptr<const Tokenizer> tokenizer_of(const DatasetKind& kind,
                                              const nlohmann::json& settings);

/// The training split's sample count of `kind` for the [data] table `settings`: train_size when
/// the kind has one, else the size of make()'s training split. Throws what they throw (a missing
/// file names it).
std::int64_t train_samples(const DatasetKind& kind, const nlohmann::json& settings,
                           std::uint64_t seed);

/// The registry of data kinds, with the built-in ones (fashion-mnist, cifar-10, cifar-100,
/// image-folder, text, tokens, synthetic-blobs, synthetic-text) added on first use.
core::Registry<DatasetKind>& dataset_registry();

}  // namespace tb::data
