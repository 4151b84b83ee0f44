#include "engine/train/weights_io.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "engine/autograd/autograd.h"
#include "engine/core/error.h"
#include "engine/nn/gpt.h"
#include "engine/ops/ops.h"
#include "engine/train/safetensors.h"

namespace tb::train {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The GPT-2 weights stored by transformers' Conv1D as [in, out] (torch.nn.Linear: [out, in]).
bool is_conv1d_weight(const std::string& name) {
  return ends_with(name, ".attn.c_attn.weight") || ends_with(name, ".attn.c_proj.weight") ||
         ends_with(name, ".mlp.c_fc.weight") || ends_with(name, ".mlp.c_proj.weight");
}

// A name without the prefixes that wrappers add when a state_dict is saved from them:
// torch.compile's "_orig_mod." and DistributedDataParallel's "module." (nanoGPT's train.py strips
// the first when it resumes; a checkpoint saved from a wrapped model has them).
std::string unwrapped(std::string name) {
  for (bool again = true; again;) {
    again = false;
    for (const std::string prefix : {"_orig_mod.", "module."})
      if (name.rfind(prefix, 0) == 0) {
        name.erase(0, prefix.size());
        again = true;
      }
  }
  return name;
}

// A file's GPT-2 tensors under our names: "transformer." prefixed where the model has that name,
// masks and lm_head skipped, Conv1D weights transposed, the table padded to the model's rows, the
// position table cut to the model's context.
nn::NamedTensors map_gpt2(const nn::Gpt& gpt, const SafetensorsFile& f, WeightsLoad& out) {
  std::set<std::string> known;
  for (const auto& [name, t] : gpt.state_dict())
    known.insert(name);
  std::map<std::string, core::Tensor> by_name;
  core::Tensor file_head;
  for (const auto& [stored, t] : f.tensors) {
    const std::string name = unwrapped(stored);
    // transformers' GPT2Model names have no "transformer." prefix; a name the model does not have
    // either way is left as the file wrote it, so that the error names it as the file does.
    const std::string ours = name.rfind("transformer.", 0) == 0 || known.count(name) != 0 ||
                                     known.count("transformer." + name) == 0
                                 ? name
                                 : "transformer." + name;
    if (ends_with(name, ".attn.bias") && t.dim() == 4) {
      out.ignored.push_back(stored + " (causal mask)");
      continue;
    }
    if (ends_with(name, ".attn.masked_bias")) {
      out.ignored.push_back(stored + " (causal mask)");
      continue;
    }
    if (name == "lm_head.weight") {
      out.ignored.push_back(stored + " (tied to transformer.wte.weight)");
      file_head = t;
      continue;
    }
    by_name.emplace(ours, t);
  }
  // Conv1D or Linear, from the file's own shapes: c_attn is [C, 3C] in the one, [3C, C] in the
  // other (whatever the model's C: a mismatch is then named in the file's layout).
  bool conv1d = false;
  if (const auto it = by_name.find("transformer.h.0.attn.c_attn.weight");
      it != by_name.end() && it->second.dim() == 2)
    conv1d = it->second.size(1) == 3 * it->second.size(0);
  out.layout = conv1d ? "gpt2 (Conv1D [in, out] weights, transposed)" : "gpt2 (Linear weights)";
  // A head that is not the table: this model ties them, so the file's head is not what it uses.
  if (file_head.defined()) {
    const auto wte = by_name.find("transformer.wte.weight");
    const bool same = wte != by_name.end() &&
                      wte->second.sizes().vec() == file_head.sizes().vec() &&
                      wte->second.dtype() == file_head.dtype() &&
                      std::memcmp(wte->second.contiguous().data_ptr(),
                                  file_head.contiguous().data_ptr(), file_head.nbytes()) == 0;
    if (!same)
      out.warnings.push_back(
          "lm_head.weight differs from transformer.wte.weight: a gpt ties its output head to "
          "the token table (as GPT-2), so the file's own head is not used and the model is not "
          "the file's");
  }
  nn::NamedTensors state;
  for (auto& [name, t] : by_name) {
    core::Tensor v = t;
    if (conv1d && is_conv1d_weight(name) && v.dim() == 2) v = v.t().contiguous();
    if (name == "transformer.wte.weight" && v.dim() == 2 && v.size(0) < gpt.wte().size(0) &&
        v.size(0) == gpt.gpt_config().vocab && v.size(1) == gpt.wte().size(1)) {
      // GPT-2's 50257 rows into a padded table: the padding stays 0.
      core::Tensor full = ops::zeros(gpt.wte().sizes(), v.dtype());
      core::Tensor head = full.narrow(0, 0, v.size(0));
      ops::copy_(head, v);
      v = full;
    }
    const std::int64_t context = gpt.gpt_config().context_length;
    if (name == "transformer.wpe.weight" && v.dim() == 2 && v.size(0) > context &&
        v.size(1) == gpt.wte().size(1)) {
      // A shorter context than the file's (GPT-2's 1024): its first positions, as nanoGPT's
      // crop_block_size does.
      out.warnings.push_back("transformer.wpe.weight: the first " + std::to_string(context) +
                             " of the file's " + std::to_string(v.size(0)) +
                             " positions (model.context_length = " + std::to_string(context) + ")");
      v = v.narrow(0, 0, context).contiguous();
    }
    state.emplace_back(name, v);
  }
  return state;
}

}  // namespace

WeightsLoad load_weights(nn::Model& model, const std::filesystem::path& file) {
  SafetensorsFile f = load_safetensors(file);
  WeightsLoad out;
  // An AveragedModel's state_dict (torch.optim.swa_utils; a checkpoint's average.safetensors):
  // "n_averaged" and the averaged module under "module.": the module's weights, the count left.
  // It was "Unexpected key(s) in state_dict: n_averaged".
  const auto count = std::find_if(f.tensors.begin(), f.tensors.end(),
                                  [](const auto& e) { return e.first == "n_averaged"; });
  if (count != f.tensors.end() && count->second.dim() == 0 &&
      std::all_of(f.tensors.begin(), f.tensors.end(), [](const auto& e) {
        return e.first == "n_averaged" || e.first.rfind("module.", 0) == 0;
      })) {
    // A count of 0: the module is the copy made when averaging was set up (every checkpoint
    // before swa.start_step holds one), the initial weights, not an average.
    TB_CHECK(count->second.item() > 0, "[init_from] ", file.string(),
             ": an AveragedModel's state with n_averaged = 0 holds no average yet (saved before "
             "swa.start_step)");
    out.ignored.push_back("n_averaged (the count of an AveragedModel's average)");
    f.tensors.erase(count);
  }
  nn::NamedTensors state;
  // A gpt takes GPT-2's names with or without the "transformer." prefix and either weight
  // layout (its own files are nanoGPT's: prefixed, Linear layout, lm_head.weight tied).
  if (const auto* gpt = dynamic_cast<const nn::Gpt*>(&model)) {
    state = map_gpt2(*gpt, f, out);
    if (const auto it = f.metadata.find("layout");
        it != f.metadata.end() && it->second == "trainbench")
      out.layout = "trainbench";
  } else {
    out.layout = "trainbench";
    for (const auto& [name, t] : f.tensors)
      state.emplace_back(unwrapped(name), t);
  }
  // A NaN or inf in the weights (a file saved from a run that had diverged) is said with the
  // tensor's name: training from it would only diverge. x * 0 sums to NaN exactly when some x is
  // not finite.
  for (const auto& [name, t] : state) {
    if (!core::is_floating_point(t.dtype()) || t.numel() == 0) continue;
    autograd::NoGradGuard no_grad;
    const double probe = ops::sum(ops::mul(t.to(core::ScalarType::Float64), 0.0)).item();
    TB_CHECK(!std::isnan(probe), "[init_from] ", file.string(), ": ", name,
             " holds NaN or infinite values; these weights cannot start a run");
  }
  try {
    autograd::NoGradGuard no_grad;
    (void)model.load_state_dict(state, /*strict=*/true);
  } catch (const ValueError& e) {
    // nanoGPT trains without biases by default: a file and a gpt that disagree on them say which
    // setting reads the file.
    std::string hint;
    if (const auto* gpt = dynamic_cast<const nn::Gpt*>(&model)) {
      bool file_biases = false;
      for (const auto& [name, t] : state)
        file_biases |= name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0 &&
                       name.find(".attn.bias") == std::string::npos;
      if (file_biases != gpt->gpt_config().bias)
        hint = file_biases ? " (the file has biases: set model.bias = true)"
                           : " (the file has no biases, as nanoGPT's bias = False: set "
                             "model.bias = false)";
    }
    throw ValueError("[init_from] " + file.string() + " (" + out.layout + "): " + e.what() + hint);
  }
  out.tensors = static_cast<std::int64_t>(state.size());
  return out;
}

WeightsSaved save_weights(const nn::Model& model, const std::filesystem::path& file,
                          const std::string& layout) {
  TB_CHECK(layout == "trainbench" || layout == "hf-gpt2", "[weights] layout '", layout,
           "' is not one of ", kWeightsLayouts);
  const auto* gpt = dynamic_cast<const nn::Gpt*>(&model);
  TB_CHECK(layout != "hf-gpt2" || gpt != nullptr,
           "[weights] layout hf-gpt2 is for gpt models, not model.kind = '",
           nn::model_kind(model.config()), "'");
  TB_CHECK(layout != "hf-gpt2" || gpt->gpt_config().bias,
           "[weights] layout hf-gpt2 writes GPT2LMHeadModel, which has biases; this gpt has "
           "model.bias = false: write layout trainbench (nanoGPT's names, which its bias = False "
           "model loads)");
  TensorList out;
  std::map<std::string, std::string> meta = {{"format", "pt"}, {"layout", layout}};
  for (const auto& [name, t] : model.state_dict()) {
    core::Tensor v = t;
    if (layout == "hf-gpt2") {
      if (is_conv1d_weight(name)) v = v.t().contiguous();
      if (name == "transformer.wte.weight")
        v = v.narrow(0, 0, gpt->gpt_config().vocab).contiguous();
    }
    out.emplace_back(name, v);
  }
  if (gpt != nullptr) {
    core::Tensor head = gpt->wte();
    if (layout == "hf-gpt2") head = head.narrow(0, 0, gpt->gpt_config().vocab);
    out.emplace_back("lm_head.weight", head.contiguous().clone());
  }
  save_safetensors(file, out, meta);
  WeightsSaved saved;
  saved.tensors = static_cast<std::int64_t>(out.size());
  for (const auto& [name, t] : out)
    saved.elements += t.numel();
  return saved;
}

}  // namespace tb::train
