// Internals of the run-config reader shared by run_config.cpp (the sections) and
// config_writer.cpp (the effective config): formatting helpers, the reading context with its
// structured errors (tb::ConfigError: key path, line, column, message), the Section reader that
// records the keys it knows, TOML -> JSON, and --set overrides. Not part of the engine's API.
#pragma once

#include <toml++/toml.h>

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/error.h"
#include "engine/core/fields.h"

namespace tb::train::detail {

using nlohmann::json;

// ---------------------------------------------------------------------------------------------
// Formatting helpers.

inline std::string fmt_double(double v) {
  return core::format_double(v);
}

inline std::string quote(const std::string& s) {
  return core::quote_string(s);
}

inline std::string json_to_toml_value(const json& j) {
  return core::json_to_toml(j);
}

// A key as written in TOML: bare when it can be, else quoted.
inline std::string toml_key(const std::string& k) {
  const bool bare = !k.empty() && std::all_of(k.begin(), k.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
  return bare ? k : quote(k);
}

// "string \"fast\"", "integer 3", "array [ 1, 2 ]", ... for messages.
inline std::string describe(const toml::node& n) {
  if (const auto* s = n.as_string()) return "string " + quote(s->get());
  if (const auto* i = n.as_integer()) return "integer " + std::to_string(i->get());
  if (const auto* f = n.as_floating_point()) return "float " + fmt_double(f->get());
  if (const auto* b = n.as_boolean())
    return std::string("boolean ") + (b->get() ? "true" : "false");
  if (n.is_table()) return "a table";
  std::ostringstream os;
  if (n.is_array()) {
    os << "array " << *n.as_array();
  } else {
    os << (n.is_date() ? "date " : n.is_time() ? "time " : "date-time ");
    n.visit([&](const auto& v) { os << v; });
  }
  return os.str();
}

inline std::string nearest(const std::string& word, const std::vector<std::string>& candidates) {
  return core::nearest_word(word, candidates);
}

inline std::string join(const std::vector<std::string>& v, const std::string& sep,
                        bool quoted = false) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i)
    s += (i ? sep : "") + (quoted ? quote(v[i]) : v[i]);
  return s;
}

// ---------------------------------------------------------------------------------------------
// Context and errors.

struct Ctx {
  std::string source;
  std::vector<std::pair<std::string, std::string>> overrides;  // key path -> value text
  const toml::table* root = nullptr;  // the parsed (and overridden) document, for locations

  // The raw text of the override that set exactly `path`, if any.
  const std::string* override_text(const std::string& path) const {
    for (auto it = overrides.rbegin(); it != overrides.rend(); ++it)
      if (it->first == path) return &it->second;
    return nullptr;
  }
  // " (from --set k=v)" when `path` or a key under it was set by an override.
  std::string origin(const std::string& path) const {
    for (auto it = overrides.rbegin(); it != overrides.rend(); ++it) {
      if (it->first == path || it->first.rfind(path + ".", 0) == 0)
        return " (from --set " + it->first + "=" + it->second + ")";
    }
    return "";
  }
  // For a key the file gave under a table whose kind an override changed (model.input after
  // --set model.kind=mlp): " (model.kind = mlp is from --set; the file's other model keys stay:
  // to replace the whole table, --set 'model={ kind = ..., ... }')", else "".
  std::string kind_hint(const std::string& path) const {
    // Only for a key the file's text gave (a key left at its default is not "the file's").
    const toml::node* own = root != nullptr ? toml::at_path(*root, path).node() : nullptr;
    if (own == nullptr || own->source().begin.line == 0) return "";
    for (std::string table = path;;) {
      const auto cut = table.find_last_of('.');
      if (cut == std::string::npos) return "";
      table.resize(cut);
      if (const std::string* kind = override_text(table + ".kind"); kind && path != table + ".kind")
        return " (" + table + ".kind = " + *kind + " is from --set; the file's other " + table +
               " keys stay: to replace the whole table, --set '" + table + "={ kind = ..., ... }')";
    }
  }
  // The problem at `path` ("" = none): its line and column in the source when the key (or,
  // for a missing key, its table) came from the text, 0 when it came from --set or nowhere.
  ConfigProblem problem(const std::string& path, const std::string& message) const;
  // "[config] SOURCE: PATH: WHAT (from --set ...)"; the problem's key is `key_path` (default
  // `path`: a model's own check names model.<field> while the message says "model: ...").
  [[noreturn]] void fail(const std::string& path, const std::string& what,
                         const std::string& key_path = {}) const;
  // A kind's own check failed under `table` (model, scheduler): a tb::FieldError points at
  // table.<field>. When no override set that field, one that set another field of the table the
  // message names is said instead ("d_model 128 is not divisible by n_heads 3" after
  // --set model.n_heads=3).
  [[noreturn]] void fail_kind(const std::string& table, const Error& e) const;
  // "[config] SOURCE: WHAT", where WHAT names `path` itself ("unknown key 'a.b'; ...").
  [[noreturn]] void fail_at(const std::string& path, const std::string& what) const;
  // "[config] SOURCE: WHAT", about no key.
  [[noreturn]] void fail_plain(const std::string& what) const { fail_at("", what); }
};

json toml_to_json(const Ctx& ctx, const std::string& path, const toml::node& n);

// Reads one table, recording the keys asked for; finish() rejects any other key with the nearest
// known one. A missing table (null) reads as empty.
class Section {
 public:
  Section(const Ctx& ctx, const toml::table* t, std::string path)
      : ctx_(ctx), t_(t), path_(std::move(path)) {}

  std::string path(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  json toml_to_json_value(const toml::node& n, const std::string& p) const {
    return toml_to_json(ctx_, p, n);
  }
  const Ctx& ctx() const { return ctx_; }
  const std::string& path() const { return path_; }

  // The node for `key` (null when absent); `key` becomes a known key.
  const toml::node* get(const std::string& key) {
    if (std::find(known_.begin(), known_.end(), key) == known_.end()) known_.push_back(key);
    return t_ ? t_->get(key) : nullptr;
  }
  // The node for `key` without making it known.
  const toml::node* peek(const std::string& key) const { return t_ ? t_->get(key) : nullptr; }
  // Dotted keys ("run.steps") an unknown key of this table may have been meant as: the top
  // level's `runsteps = 3` or `steps = 3` (a key written outside its section).
  void suggest_dotted(std::vector<std::string> keys) { dotted_ = std::move(keys); }

  [[noreturn]] void type_error(const std::string& key, const std::string& expected,
                               const toml::node& n) const {
    ctx_.fail(path(key), "expected " + expected + ", found " + describe(n));
  }

  bool read(const std::string& key, std::string& out) {
    const auto* n = get(key);
    if (!n) return false;
    if (const auto* s = n->as_string()) {
      out = s->get();
    } else if (const auto* raw = ctx_.override_text(path(key))) {
      out = *raw;  // --set run.name=2024: a bare value meant as a string
    } else {
      type_error(key, "a string", *n);
    }
    return true;
  }
  bool read(const std::string& key, bool& out) {
    const auto* n = get(key);
    if (!n) return false;
    if (!n->is_boolean()) type_error(key, "a boolean (true or false)", *n);
    out = n->as_boolean()->get();
    return true;
  }
  bool read(const std::string& key, double& out) {
    const auto* n = get(key);
    if (!n) return false;
    if (const auto* i = n->as_integer()) {
      out = static_cast<double>(i->get());
    } else if (const auto* f = n->as_floating_point()) {
      out = f->get();
    } else {
      type_error(key, "a number", *n);
    }
    return true;
  }
  bool read(const std::string& key, std::int64_t& out) {
    const auto* n = get(key);
    if (!n) return false;
    if (!n->is_integer()) type_error(key, "an integer", *n);
    out = n->as_integer()->get();
    return true;
  }
  bool read(const std::string& key, std::uint64_t& out) {
    const auto* n = get(key);
    if (!n) return false;
    if (!n->is_integer()) type_error(key, "an integer >= 0", *n);
    const std::int64_t v = n->as_integer()->get();
    if (v < 0) ctx_.fail(path(key), "expected an integer >= 0, found " + std::to_string(v));
    out = static_cast<std::uint64_t>(v);
    return true;
  }
  bool read(const std::string& key, std::vector<std::string>& out) {
    const auto* n = get(key);
    if (!n) return false;
    const auto* a = n->as_array();
    if (!a) type_error(key, "an array of strings", *n);
    std::vector<std::string> v;
    for (const auto& e : *a) {
      if (!e.is_string()) type_error(key, "an array of strings", *n);
      v.push_back(e.as_string()->get());
    }
    out = std::move(v);
    return true;
  }
  // A sub-table (null when absent); `key` becomes a known key.
  const toml::table* table(const std::string& key) {
    const auto* n = get(key);
    if (!n) return nullptr;
    if (!n->is_table()) type_error(key, "a table", *n);
    return n->as_table();
  }

  // Range and enum checks on a value already read.
  void check_min(const std::string& key, double v, double min, bool finite = true) const {
    if (!(v >= min) || (finite && !std::isfinite(v)))
      ctx_.fail(path(key), "expected a " + std::string(finite ? "finite " : "") +
                               "number >= " + fmt_double(min) + ", found " + fmt_double(v));
  }
  void check_min(const std::string& key, std::int64_t v, std::int64_t min) const {
    if (v < min)
      ctx_.fail(path(key),
                "expected an integer >= " + std::to_string(min) + ", found " + std::to_string(v));
  }
  void check_max(const std::string& key, std::int64_t v, std::int64_t max) const {
    if (v > max)
      ctx_.fail(path(key),
                "expected an integer <= " + std::to_string(max) + ", found " + std::to_string(v));
  }
  // lo <= v < hi (or lo < v when open_lo).
  void check_range(const std::string& key, double v, double lo, double hi, bool open_lo,
                   bool open_hi) const {
    const bool ok = (open_lo ? v > lo : v >= lo) && (open_hi ? v < hi : v <= hi);
    if (!ok)
      ctx_.fail(path(key), std::string("expected a number in ") + (open_lo ? "(" : "[") +
                               fmt_double(lo) + ", " + fmt_double(hi) + (open_hi ? ")" : "]") +
                               ", found " + fmt_double(v));
  }
  void check_enum(const std::string& key, const std::string& v,
                  const std::vector<std::string>& allowed) const {
    if (std::find(allowed.begin(), allowed.end(), v) != allowed.end()) return;
    ctx_.fail(path(key), "expected one of " + join(allowed, ", ", true) + ", found " + quote(v) +
                             "; did you mean " + quote(nearest(v, allowed)) + "?");
  }

  // Reads field `f` into out[f.key] when present (type-checked), then checks the value there
  // (read or default) against the field's range and choices; a required field must be present.
  void read_field(const core::FieldSpec& f, json& out) {
    using core::FieldType;
    const toml::node* n = peek(f.key);
    switch (f.type) {
      case FieldType::kBool: {
        bool b = false;
        if (read(f.key, b)) out[f.key] = b;
        break;
      }
      case FieldType::kInt: {
        std::int64_t i = 0;
        if (read(f.key, i)) out[f.key] = i;
        break;
      }
      case FieldType::kFloat: {
        double d = 0;
        if (read(f.key, d)) out[f.key] = d;
        break;
      }
      case FieldType::kString: {
        std::string str;
        if (read(f.key, str)) out[f.key] = str;
        break;
      }
      case FieldType::kStringList: {
        std::vector<std::string> v;
        if (read(f.key, v)) out[f.key] = v;
        break;
      }
      case FieldType::kIntList: {
        (void)get(f.key);
        if (!n) break;
        const auto* a = n->as_array();
        if (!a) type_error(f.key, "an array of integers", *n);
        json arr = json::array();
        for (const auto& e : *a) {
          if (!e.is_integer()) type_error(f.key, "an array of integers", *n);
          arr.push_back(e.as_integer()->get());
        }
        out[f.key] = arr;
        break;
      }
      case FieldType::kAny:
        (void)get(f.key);
        if (n) out[f.key] = toml_to_json_value(*n, path(f.key));
        break;
    }
    if (!out.contains(f.key) || out.at(f.key).is_null()) {
      if (f.required()) ctx_.fail(path(f.key), "is required (" + f.help + ")");
      return;
    }
    if (auto problem = f.check(out.at(f.key))) ctx_.fail(path(f.key), *problem);
  }

  // Every key of the table must have been asked for.
  void finish() const {
    if (!t_) return;
    for (const auto& [k, v] : *t_) {
      const std::string key(k.str());
      if (std::find(known_.begin(), known_.end(), key) != known_.end()) continue;
      const std::string full = path(key);
      const std::string what = path_.empty() && v.is_table() ? "section" : "key";
      std::string msg = "unknown " + what + " '" + full + "'";
      if (full == "sweep" && v.is_table()) {
        msg += ": this is a sweep config; run it with trainbench-cli sweep FILE";
      } else if (const std::string dotted = v.is_table() ? std::string() : dotted_for(key);
                 !dotted.empty() && prefers_dotted(key)) {
        msg += "; did you mean '" + dotted + "'?";
      } else if (const std::string close = core::close_word(key, known_); !close.empty()) {
        msg += "; did you mean '" + path(close) + "'?";
      } else if (!known_.empty()) {
        // Not a typo of any of them: say what the table takes instead of a far-off guess.
        msg += "; " +
               (path_.empty() ? std::string("known at the top: ") : "'" + path_ + "' takes ") +
               core::join_or(known_);
      }
      // A kind set by --set keeps the file's other keys of the table, written for its old kind
      // (as Ctx::fail says it for a field of the kind).
      const std::string from = ctx_.origin(full);
      ctx_.fail_at(full, msg + (from.empty() ? ctx_.kind_hint(full) : from));
    }
  }

 private:
  // The dotted key an unknown plain key was likely meant as: the key of that name ("steps" for
  // "run.steps"; "lr" for "optimizer.lr", the shortest of one section's), else a near spelling
  // of one ("runsteps", "run_steps").
  std::string dotted_for(const std::string& key) const {
    if (dotted_.empty()) return {};
    std::vector<std::string> named;  // the keys of that name
    for (const auto& d : dotted_) {
      const auto dot = d.rfind('.');
      if (dot != std::string::npos && d.compare(dot + 1, std::string::npos, key) == 0)
        named.push_back(d);
    }
    if (named.empty()) return core::close_word(key, dotted_);
    // In several sections ("interval": eval and checkpoint): no one guess. In one, the shortest
    // ("optimizer.lr" over "optimizer.muon.lr").
    for (const auto& n : named)
      if (section_of(n) != section_of(named.front())) return {};
    return *std::min_element(named.begin(), named.end(),
                             [](const auto& a, const auto& b) { return a.size() < b.size(); });
  }
  static std::string section_of(const std::string& dotted) {
    return dotted.substr(0, dotted.find('.'));
  }
  // Whether a dotted guess beats a guess among this table's own names: unless the key is a near
  // spelling of one of them ("optimiser" of the section "optimizer", "thread" of "threads"),
  // other than one run together with more ("runsteps": "run" + "steps").
  bool prefers_dotted(const std::string& key) const {
    const std::string own = core::close_word(key, known_);
    return own.empty() || (key.size() > own.size() && key.rfind(own, 0) == 0);
  }

  const Ctx& ctx_;
  const toml::table* t_;
  std::string path_;
  std::vector<std::string> known_;
  std::vector<std::string> dotted_;
};

/// Applies one "key.path=value" override to `root` and records it in `ctx`.
void apply_override(Ctx& ctx, toml::table& root, const std::string& text);

}  // namespace tb::train::detail
