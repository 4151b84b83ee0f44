// Model weights in safetensors files that other tools read and write: initialising a model from
// a file (TrainBench's own names — the torch.nn names of the same modules — or, for a `gpt`
// model, GPT-2's as Hugging Face transformers and nanoGPT save them), and exporting a model so
// that torch.nn.Module.load_state_dict takes it.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "engine/nn/models.h"

namespace tb::train {

/// What load_weights found in the file.
struct WeightsLoad {
  /// "trainbench", "gpt2 (Conv1D [in, out] weights, transposed)" or "gpt2 (Linear weights)".
  std::string layout;
  std::vector<std::string> ignored;  ///< file tensors not used (GPT-2's attention masks, lm_head)
  /// What the model takes differently from the file: an untied head dropped, positions cut.
  std::vector<std::string> warnings;
  std::int64_t tensors = 0;  ///< tensors loaded
};

/// Initialises every parameter and persistent buffer of `model` from the safetensors `file`
/// (values converted to the model's dtypes). For a `gpt` model the file may use GPT-2's names
/// with or without the "transformer." prefix (transformers' GPT2Model / GPT2LMHeadModel,
/// nanoGPT) and Conv1D's [in, out] weight layout (detected from attn.c_attn's shape and
/// transposed); its causal-mask buffers (attn.bias, attn.masked_bias) and the tied lm_head.weight
/// are skipped, and a 50257-row table fills the first rows of a padded one. A missing,
/// unexpected or mis-shaped tensor is a tb::ValueError naming the file and every such tensor;
/// the model is left untouched then.
WeightsLoad load_weights(nn::Model& model, const std::filesystem::path& file);

/// Weight layouts save_weights writes.
inline constexpr const char* kWeightsLayouts = "trainbench, hf-gpt2";

/// Writes `model`'s state_dict to `file` (atomically). `layout` "trainbench": the model's own
/// names and shapes — a `gpt` adds "lm_head.weight" (a copy of the tied table) as nanoGPT's
/// state_dict has it; "hf-gpt2" (gpt models only): transformers' GPT2LMHeadModel state_dict —
/// Conv1D weights as [in, out], the table cut to `vocab` rows, lm_head.weight. Throws
/// tb::ValueError for an unknown layout or hf-gpt2 with another model kind.
/// Returns what the file holds: its tensors and their elements (a tied head counted again, the
/// table cut to vocab rows), which may differ from the model's.
struct WeightsSaved {
  std::int64_t tensors = 0;   ///< tensors in the file
  std::int64_t elements = 0;  ///< their elements, summed
};
WeightsSaved save_weights(const nn::Model& model, const std::filesystem::path& file,
                          const std::string& layout = "trainbench");

}  // namespace tb::train
