#include "engine/optim/param_split.h"

#include <iomanip>
#include <set>
#include <sstream>

#include "engine/core/error.h"

namespace tb::optim {

bool glob_match(const std::string& pattern, const std::string& name) {
  // Iterative wildcard match with backtracking to the last '*'.
  std::size_t p = 0, n = 0, star = std::string::npos, mark = 0;
  while (n < name.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p;
      ++n;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = n;
    } else if (star != std::string::npos) {
      p = star + 1;
      n = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*')
    ++p;
  return p == pattern.size();
}

ParamSplit split_params(const nn::Module& model, const std::vector<SplitOverride>& overrides,
                        bool flatten_conv) {
  for (const auto& [pattern, opt] : overrides) {
    TB_CHECK(opt == "muon" || opt == "adamw", "parameter split: override '", pattern, "' names '",
             opt, "'; choose muon or adamw");
  }
  const auto params = model.named_parameters();
  // The output head: "lm_head" by name; in a model without an embedding table (an mlp) the
  // last 2-D parameter. With an embedding and no lm_head the head is tied to the embedding.
  // Embedding tables: parameters of Embedding modules (GPT-2's wte/wpe) or named "embed...".
  std::set<std::string> embeddings;
  for (const auto& [path, m] : model.named_modules())
    if (m->type_name() == "Embedding")
      for (const auto& [name, t] : m->named_parameters(false))
        embeddings.insert(path.empty() ? name : path + "." + name);
  auto is_embedding = [&](const std::string& name) {
    return embeddings.count(name) != 0 || name.find("embed") != std::string::npos;
  };
  std::string last_2d;
  bool has_embedding = false;
  for (const auto& [name, t] : params) {
    if (t.dim() == 2) last_2d = name;
    has_embedding |= is_embedding(name);
  }
  if (has_embedding) last_2d.clear();
  ParamSplit out;
  for (const auto& [name, t] : params) {
    SplitRow row;
    row.name = name;
    row.shape.assign(t.sizes().begin(), t.sizes().end());
    if (flatten_conv && t.dim() > 2) {
      row.optimizer = "muon";
      row.reason = "conv filter as [out, in*kh*kw]";
    } else if (t.dim() != 2) {
      row.optimizer = "adamw";
      row.reason = std::to_string(t.dim()) + "-D";
    } else if (is_embedding(name)) {
      row.optimizer = "adamw";
      row.reason = "embedding";
    } else if (name.find("lm_head") != std::string::npos || name == last_2d) {
      row.optimizer = "adamw";
      row.reason = "output head";
    } else {
      row.optimizer = "muon";
      row.reason = "2-D hidden matrix";
    }
    for (const auto& [pattern, opt] : overrides) {
      if (!glob_match(pattern, name)) continue;
      TB_CHECK(opt != "muon" || t.dim() == 2 || (flatten_conv && t.dim() > 2),
               "parameter split: override '", pattern, "' sends '", name,
               "' to muon, but Muon only supports 2-D parameters (shape ",
               core::DimVector(t.sizes()), ")",
               t.dim() > 2 ? "; conv_filters = \"flatten\" orthogonalises filters as "
                             "[out, in*kh*kw]"
                           : "");
      row.optimizer = opt;
      row.reason = "override '" + pattern + "'";
    }
    (row.optimizer == "muon" ? out.muon : out.adamw).emplace_back(name, t);
    out.table.push_back(std::move(row));
  }
  return out;
}

std::string ParamSplit::str() const {
  auto shape_of = [](const SplitRow& r) {
    std::ostringstream shape;
    shape << core::DimVector(core::IntList(r.shape.data(), r.shape.size()));
    return shape.str();
  };
  // Columns as wide as their longest entry (a conv filter's [64, 32, 3, 3] ran into the next).
  std::size_t w = 4, sw = 12;
  for (const auto& r : table) {
    w = std::max(w, r.name.size());
    sw = std::max(sw, shape_of(r).size());
  }
  std::ostringstream os;
  std::int64_t n_muon = 0, n_adamw = 0;
  for (const auto& r : table) {
    std::int64_t numel = 1;
    for (auto s : r.shape)
      numel *= s;
    (r.optimizer == "muon" ? n_muon : n_adamw) += numel;
    os << std::left << std::setw(static_cast<int>(w) + 2) << r.name
       << std::setw(static_cast<int>(sw) + 2) << shape_of(r) << std::setw(7) << r.optimizer
       << r.reason << "\n";
  }
  auto tensors = [](std::size_t n) {
    return std::to_string(n) + (n == 1 ? " tensor" : " tensors");
  };
  os << "muon: " << tensors(muon.size()) << ", " << n_muon
     << " elements; adamw: " << tensors(adamw.size()) << ", " << n_adamw << " elements\n";
  return os.str();
}

}  // namespace tb::optim
