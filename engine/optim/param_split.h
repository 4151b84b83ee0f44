// Which parameters Muon optimizes and which AdamW does: 2-D hidden weight matrices go to Muon;
// embeddings, the output head, norms and biases (anything not 2-D) go to AdamW. The split is a
// table the user can read, and name patterns override it.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "engine/nn/module.h"

namespace tb::optim {

/// One row of the split table.
struct SplitRow {
  std::string name;                 ///< full parameter name
  std::vector<std::int64_t> shape;  ///< its shape
  std::string optimizer;            ///< "muon" or "adamw"
  std::string reason;  ///< why, e.g. "2-D hidden matrix", "embedding", "output head", "1-D"
};

/// The split: parameters per optimizer (in model order) and the table.
struct ParamSplit {
  nn::NamedTensors muon;        ///< 2-D hidden matrices
  nn::NamedTensors adamw;       ///< everything else
  std::vector<SplitRow> table;  ///< one row per parameter, model order
  /// The table as aligned text with a summary line (counts and elements per optimizer).
  std::string str() const;
};

/// A name pattern (glob: `*` any run of characters, `?` one character) and the optimizer
/// ("muon" or "adamw") it forces. Later overrides win over earlier ones.
using SplitOverride = std::pair<std::string, std::string>;

/// True when `name` matches the glob `pattern` as a whole.
bool glob_match(const std::string& pattern, const std::string& name);

/// Splits `model`'s parameters. Default rules, in order: with `flatten_conv`, a parameter of
/// more than 2 dimensions (a convolution filter) -> muon ("conv filter as [out, in*kh*kw]");
/// not 2-D -> adamw ("1-D", "4-D" etc.); a parameter of an Embedding module, or a name that
/// contains "embed" -> adamw ("embedding"); name
/// contains "lm_head", or, in a model without an embedding table, is the last 2-D parameter
/// (the mlp's output layer) -> adamw ("output head"); else muon.
/// Overrides then apply; forcing a 1-D parameter to muon (or one of more than 2 dimensions
/// without `flatten_conv`) is a tb::ValueError naming it, as is an optimizer name other than
/// muon/adamw.
ParamSplit split_params(const nn::Module& model, const std::vector<SplitOverride>& overrides = {},
                        bool flatten_conv = false);

}  // namespace tb::optim
