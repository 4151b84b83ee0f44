// RunConfig from TOML (toml++): a reader per section that records the keys it knows, so that any
// key left over is reported with the nearest valid one; overrides are applied to the parsed tree
// before reading, and remembered so that messages can say a value came from --set. to_toml()
// writes every key by hand (shortest round-trip numbers, escaped strings) so that
// parse_run_config(to_toml(c)) reads the same values back.
#include "engine/train/run_config.h"

#include <toml++/toml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

#include "engine/core/device.h"
#include "engine/core/error.h"
#include "engine/core/fields.h"
#include "engine/data/registry.h"
#include "engine/nn/model_registry.h"
#include "engine/optim/registry.h"
#include "engine/sched/lr_scheduler.h"

namespace tb::train {

namespace {

using nlohmann::json;

// ---------------------------------------------------------------------------------------------
// Formatting helpers.

std::string fmt_double(double v) {
  return core::format_double(v);
}

std::string quote(const std::string& s) {
  return core::quote_string(s);
}

std::string json_to_toml_value(const json& j) {
  return core::json_to_toml(j);
}

// A key as written in TOML: bare when it can be, else quoted.
std::string toml_key(const std::string& k) {
  const bool bare = !k.empty() && std::all_of(k.begin(), k.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
  return bare ? k : quote(k);
}

// "string \"fast\"", "integer 3", "array [ 1, 2 ]", ... for messages.
std::string describe(const toml::node& n) {
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

std::string nearest(const std::string& word, const std::vector<std::string>& candidates) {
  return core::nearest_word(word, candidates);
}

std::string join(const std::vector<std::string>& v, const std::string& sep, bool quoted = false) {
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
  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    throw ValueError("[config] " + source + ": " + path + ": " + what + origin(path));
  }
  [[noreturn]] void fail_plain(const std::string& what) const {
    throw ValueError("[config] " + source + ": " + what);
  }
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
      if (!known_.empty()) msg += "; did you mean '" + path(nearest(key, known_)) + "'?";
      ctx_.fail_plain(msg + ctx_.origin(full));
    }
  }

 private:
  const Ctx& ctx_;
  const toml::table* t_;
  std::string path_;
  std::vector<std::string> known_;
};

// A TOML value as JSON (integers stay integers, floats floats); dates are an error.
json toml_to_json(const Ctx& ctx, const std::string& path, const toml::node& n) {
  if (const auto* s = n.as_string()) return s->get();
  if (const auto* i = n.as_integer()) return i->get();
  if (const auto* f = n.as_floating_point()) return f->get();
  if (const auto* b = n.as_boolean()) return b->get();
  if (const auto* a = n.as_array()) {
    json out = json::array();
    std::size_t i = 0;
    for (const toml::node& e : *a)
      out.push_back(toml_to_json(ctx, path + "[" + std::to_string(i++) + "]", e));
    return out;
  }
  if (const auto* t = n.as_table()) {
    json out = json::object();
    for (const auto& [k, v] : *t)
      out[std::string(k.str())] = toml_to_json(ctx, path + "." + std::string(k.str()), v);
    return out;
  }
  ctx.fail(path, "expected a string, number, boolean, array or table, found " + describe(n));
}

// ---------------------------------------------------------------------------------------------
// Overrides.

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

void apply_override(Ctx& ctx, toml::table& root, const std::string& text) {
  const auto eq = text.find('=');
  if (eq == std::string::npos)
    ctx.fail_plain("--set " + text + ": expected key.path=value (e.g. optimizer.lr=0.003)");
  const std::string key = trim(text.substr(0, eq));
  const std::string raw = trim(text.substr(eq + 1));
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    const auto dot = key.find('.', start);
    parts.push_back(key.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  for (const auto& p : parts)
    if (p.empty())
      ctx.fail_plain("--set " + text + ": expected key.path=value with a non-empty key path");
  // The value: TOML when it parses as one value, else the text as a bare string.
  toml::table doc;
  bool is_toml = false;
  try {
    doc = toml::parse(std::string_view("v = " + raw + "\n"), std::string_view("--set"));
    is_toml = doc.size() == 1 && doc.get("v") != nullptr;
  } catch (const toml::parse_error&) {
    is_toml = false;
  }
  if (!is_toml) {
    doc = toml::table{};
    doc.insert("v", raw);
  }
  toml::table* t = &root;
  std::string path;
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    path += (i ? "." : "") + parts[i];
    toml::node* n = t->get(parts[i]);
    if (!n) {
      t->insert(parts[i], toml::table{});
      n = t->get(parts[i]);
    } else if (!n->is_table()) {
      ctx.fail_plain("--set " + text + ": '" + path + "' is " + describe(*n) + ", not a table");
    }
    t = n->as_table();
  }
  doc["v"].node()->visit([&](const auto& v) { t->insert_or_assign(parts.back(), v); });
  ctx.overrides.emplace_back(key, raw);
}

// ---------------------------------------------------------------------------------------------
// Sections.

const std::vector<std::string> kSections = {"run",        "model",   "data",   "optimizer",
                                            "scheduler",  "amp",     "swa",    "eval",
                                            "checkpoint", "binding", "threads"};
const std::vector<std::string> kBindingModes = {"none", "node", "socket", "exclusive",
                                                "core-complex"};

void read_run(Section& s, RunSection& r) {
  s.read("name", r.name);
  if (r.name.empty()) s.ctx().fail(s.path("name"), "expected a non-empty string, found \"\"");
  s.read("tags", r.tags);
  s.read("seed", r.seed);
  if (s.read("device", r.device)) {
    try {
      (void)core::Device::parse(r.device);
    } catch (const Error&) {
      s.ctx().fail(s.path("device"),
                   "expected \"cpu\", \"cuda[:N]\" or \"openreg[:N]\", found " + quote(r.device));
    }
  }
  s.read("steps", r.steps);
  s.check_min("steps", r.steps, 0);
  s.read("epochs", r.epochs);
  s.check_min("epochs", r.epochs, 0);
  if (r.steps == 0 && r.epochs == 0)
    s.ctx().fail(s.path("steps"),
                 "expected run.steps > 0 or run.epochs > 0, found steps = 0 and epochs = 0");
  s.read("log_interval", r.log_interval);
  s.check_min("log_interval", r.log_interval, 1);
  s.read("max_nonfinite", r.max_nonfinite);
  s.check_min("max_nonfinite", r.max_nonfinite, 1);
  s.read("grad_clip", r.grad_clip);
  s.check_min("grad_clip", r.grad_clip, 0.0);
  s.finish();
}

// [model]: kind and its fields (type, range and choice checks from the kind's field specs), then
// nn::model_config_from_json (the kind's own checks, "model: mlp: ...").
nn::ModelConfig read_model(Section& s) {
  std::string kind = "mlp";
  s.read("kind", kind);
  s.check_enum("kind", kind, nn::model_registry().names());
  const auto entry = nn::model_registry().at(kind);
  json j = json::object();
  j["kind"] = kind;
  for (const auto& f : entry->fields)
    s.read_field(f, j);
  s.finish();
  try {
    return nn::model_config_from_json(j);
  } catch (const Error& e) {
    s.ctx().fail(s.path(), e.what());
  }
}

void read_data(Section& s, DataSection& d) {
  s.read("kind", d.kind);
  s.check_enum("kind", d.kind, data::dataset_registry().names());
  s.read("path", d.path);
  s.read("batch_size", d.batch_size);
  s.check_min("batch_size", d.batch_size, 1);
  s.read("workers", d.workers);
  s.check_min("workers", d.workers, 0);
  s.read("shuffle", d.shuffle);
  s.read("drop_last", d.drop_last);
  s.read("context_length", d.context_length);
  s.check_min("context_length", d.context_length, 1);
  s.read("val_fraction", d.val_fraction);
  s.check_range("val_fraction", d.val_fraction, 0.0, 1.0, true, true);
  s.read("normalize", d.normalize);
  const auto entry = data::dataset_registry().at(d.kind);
  d.extra = core::default_values(entry->fields);
  for (const auto& f : entry->fields)
    s.read_field(f, d.extra);
  s.finish();
}

// Reads the settings of o.kind (its fields, then its own checks); a key that only another kind
// has gets a message naming the kind and its keys.
void read_settings(Section& s, OptimizerSettings& o) {
  const auto kind = optim::optimizer_registry().at(o.kind);
  for (const auto& f : kind->fields)
    s.read_field(f, o.values);
  if (kind->validate) {
    if (const auto problem = kind->validate(o.values))
      s.ctx().fail(s.path(problem->key), problem->message);
  }
  const auto mine = core::field_keys(kind->fields);
  for (const auto& other : optim::optimizer_registry().entries()) {
    for (const auto& f : other->fields) {
      if (std::find(mine.begin(), mine.end(), f.key) != mine.end() || !s.peek(f.key)) continue;
      s.ctx().fail_plain("unknown key '" + s.path(f.key) + "' for optimizer kind " + quote(o.kind) +
                         " (its keys: " + join(mine, ", ") + ")" + s.ctx().origin(s.path(f.key)));
    }
  }
}

// The kinds that take only the 2-D hidden matrices (Muon), for messages.
std::vector<std::string> matrix_kinds() {
  std::vector<std::string> out;
  for (const auto& e : optim::optimizer_registry().entries())
    if (!e->rest_kind.empty()) out.push_back(e->name);
  return out;
}

std::string or_list(const std::vector<std::string>& quoted_items) {
  std::string s;
  for (std::size_t i = 0; i < quoted_items.size(); ++i)
    s += (i == 0 ? "" : i + 1 == quoted_items.size() ? " or " : ", ") + quoted_items[i];
  return s;
}

std::string kind_eq_list(const std::vector<std::string>& kinds) {
  std::vector<std::string> q;
  for (const auto& k : kinds)
    q.push_back("optimizer.kind = " + quote(k));
  return or_list(q);
}

void read_optimizer(Section& s, OptimizerSection& o) {
  std::string kind = "adamw";
  s.read("kind", kind);
  s.check_enum("kind", kind, optim::optimizer_registry().names());
  const auto entry = optim::optimizer_registry().at(kind);
  o = OptimizerSection{};
  o.main = OptimizerSettings(kind);
  if (entry->rest_kind.empty()) {
    for (const auto& mk : matrix_kinds()) {
      const std::string rest = optim::optimizer_registry().at(mk)->rest_kind;
      for (const std::string& sub : {mk, rest}) {
        if (s.peek(sub) && s.peek(sub)->is_table())
          s.ctx().fail(s.path(sub), "the [optimizer." + mk + "] and [optimizer." + rest +
                                        "] sub-tables are only read with optimizer.kind = " +
                                        quote(mk) + ", found kind = " + quote(kind));
      }
    }
    if (s.peek("split"))
      s.ctx().fail(s.path("split"), "only read with " + kind_eq_list(matrix_kinds()) +
                                        ", found kind = " + quote(kind));
    read_settings(s, o.main);
    s.finish();
    return;
  }
  // A matrix kind: its settings in [optimizer.<kind>], the rest's (defaults when absent) in
  // [optimizer.<rest_kind>].
  const std::string rest = entry->rest_kind;
  const auto rest_entry = optim::optimizer_registry().at(rest);
  for (const auto& k : core::field_keys(entry->fields)) {
    if (s.peek(k))
      s.ctx().fail_plain("unknown key '" + s.path(k) + "' with optimizer.kind = " + quote(kind) +
                         "; did you mean 'optimizer." + kind + "." + k + "' (or 'optimizer." +
                         rest + "." + k + "')?" + s.ctx().origin(s.path(k)));
  }
  for (const auto& k : core::field_keys(rest_entry->fields)) {
    if (s.peek(k))
      s.ctx().fail_plain("unknown key '" + s.path(k) + "' with optimizer.kind = " + quote(kind) +
                         "; did you mean 'optimizer." + rest + "." + k + "'?" +
                         s.ctx().origin(s.path(k)));
  }
  Section main(s.ctx(), s.table(kind), s.path(kind));
  read_settings(main, o.main);
  main.finish();
  o.adamw = OptimizerSettings(rest);
  Section rest_section(s.ctx(), s.table(rest), s.path(rest));
  read_settings(rest_section, *o.adamw);
  rest_section.finish();
  if (const auto* n = s.get("split")) {
    const std::string expected = "an array of [glob, " + quote(kind) + " | " + quote(rest) +
                                 "] pairs, e.g. [[\"*.mlp.*\", " + quote(rest) + "]]";
    const auto* a = n->as_array();
    if (!a) s.type_error("split", expected, *n);
    std::size_t i = 0;
    for (const toml::node& elem : *a) {
      const std::string p = s.path("split") + "[" + std::to_string(i++) + "]";
      const auto* pair = elem.as_array();
      if (!pair || pair->size() != 2 || !(*pair)[0].is_string() || !(*pair)[1].is_string())
        s.ctx().fail(p, "expected " + expected + ", found " + describe(elem));
      const std::string glob = (*pair)[0].as_string()->get();
      const std::string which = (*pair)[1].as_string()->get();
      if (glob.empty()) s.ctx().fail(p, "expected a non-empty glob, found \"\"");
      if (which != kind && which != rest)
        s.ctx().fail(p, "expected " + quote(kind) + " or " + quote(rest) +
                            " as the second element, found " + quote(which));
      o.split.emplace_back(glob, which);
    }
  }
  s.finish();
}

const std::vector<std::string> kSchedulerPreviewOnly = {"lr", "optimizer", "metrics"};

json read_scheduler(const Ctx& ctx, const toml::node* n) {
  if (!n) return nullptr;
  if (!n->is_table()) ctx.fail("scheduler", "expected a table, found " + describe(*n));
  json j = toml_to_json(ctx, "scheduler", *n);
  if (j.empty()) return nullptr;
  if (!j.contains("kind") || !j.at("kind").is_string())
    ctx.fail("scheduler.kind",
             "expected a string (a scheduler kind such as \"cosine\", or \"none\"), found " +
                 (j.contains("kind") ? describe(*n->as_table()->get("kind")) : "nothing"));
  if (j.at("kind") == "none") {
    if (j.size() > 1) {
      for (const auto& [k, v] : j.items())
        if (k != "kind")
          ctx.fail_plain("unknown key 'scheduler." + k + "' with scheduler.kind = \"none\"" +
                         ctx.origin("scheduler." + k));
    }
    return nullptr;
  }
  for (const auto& k : kSchedulerPreviewOnly) {
    if (j.contains(k))
      ctx.fail("scheduler." + k,
               "is a preview-only field, not read in a run config (the base LR is optimizer.lr)");
  }
  try {
    (void)sched::preview(j, 1);
  } catch (const Error& e) {
    ctx.fail("scheduler", e.what());
  }
  return j;
}

void read_amp(Section& s, AmpSection& a) {
  s.read("enabled", a.enabled);
  s.read("dtype", a.dtype);
  s.check_enum("dtype", a.dtype, {"bf16", "fp16"});
  // fp16 needs loss scaling in practice: grad_scaler defaults to true with fp16.
  a.grad_scaler = a.dtype == "fp16";
  s.read("grad_scaler", a.grad_scaler);
  s.read("tf32", a.tf32);
  s.finish();
}

void read_swa(Section& s, SwaSection& w) {
  s.read("kind", w.kind);
  s.check_enum("kind", w.kind, {"none", "swa", "ema"});
  s.read("ema_decay", w.ema_decay);
  s.check_range("ema_decay", w.ema_decay, 0.0, 1.0, false, false);
  s.read("start_step", w.start_step);
  s.check_min("start_step", w.start_step, 0);
  s.read("every", w.every);
  s.check_min("every", w.every, 1);
  s.finish();
}

// Rules between sections: the model solves the data set's task and fits its samples.
void cross_check(const Ctx& ctx, const RunConfig& c) {
  const auto model = nn::model_registry().at(c.model.kind);
  const auto data = data::dataset_registry().at(c.data.kind);
  if (model->task != data->task) {
    std::vector<std::string> fitting;
    for (const auto& d : data::dataset_registry().entries())
      if (d->task == model->task) fitting.push_back(quote(d->name));
    ctx.fail("data.kind", "expected " + or_list(fitting) + " for model.kind = " +
                              quote(c.model.kind) + ", found " + quote(c.data.kind));
  }
  if (model->fit) {
    if (const auto problem = model->fit(c.model.fields, data->shape(data_settings(c.data))))
      ctx.fail(problem->key, problem->message);
  }
}

}  // namespace

OptimizerSettings::OptimizerSettings() : OptimizerSettings("adamw") {}

OptimizerSettings::OptimizerSettings(const std::string& k)
    : kind(k), values(core::default_values(optim::optimizer_registry().at(k)->fields)) {}

double OptimizerSettings::number(const std::string& key) const {
  const auto it = values.find(key);
  TB_CHECK(it != values.end() && it->is_number(), "[config] optimizer kind '", kind,
           "' has no number setting '", key, "'");
  return it->get<double>();
}

OptimizerSettings& OptimizerSettings::set(const std::string& key, json value) {
  const auto entry = optim::optimizer_registry().at(kind);
  TB_CHECK(core::find_field(entry->fields, key) != nullptr, "[config] optimizer kind '", kind,
           "' has no setting '", key,
           "' (its settings: ", join(core::field_keys(entry->fields), ", "), ")");
  values[key] = std::move(value);
  return *this;
}

json data_settings(const DataSection& d) {
  json j = d.extra.is_object() ? d.extra : json::object();
  j["kind"] = d.kind;
  j["path"] = d.path;
  j["batch_size"] = d.batch_size;
  j["workers"] = d.workers;
  j["shuffle"] = d.shuffle;
  j["drop_last"] = d.drop_last;
  j["context_length"] = d.context_length;
  j["val_fraction"] = d.val_fraction;
  j["normalize"] = d.normalize;
  return j;
}

RunConfig parse_run_config(const std::string& toml_text, const std::string& source,
                           const std::vector<std::string>& overrides) {
  Ctx ctx{source, {}};
  toml::table root;
  try {
    root = toml::parse(std::string_view(toml_text), std::string_view(source));
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    ctx.fail_plain("line " + std::to_string(b.line) + ", column " + std::to_string(b.column) +
                   ": invalid TOML: " + std::string(e.description()));
  }
  for (const auto& o : overrides)
    apply_override(ctx, root, o);

  RunConfig c;
  Section top(ctx, &root, "");
  auto section = [&](const char* name) { return Section(ctx, top.table(name), name); };
  {
    Section s = section("run");
    read_run(s, c.run);
  }
  {
    Section s = section("model");
    c.model = read_model(s);
  }
  {
    Section s = section("data");
    read_data(s, c.data);
  }
  {
    Section s = section("optimizer");
    read_optimizer(s, c.optimizer);
  }
  c.scheduler.config = read_scheduler(ctx, top.get("scheduler"));
  {
    Section s = section("amp");
    read_amp(s, c.amp);
  }
  {
    Section s = section("swa");
    read_swa(s, c.swa);
  }
  {
    Section s = section("eval");
    s.read("interval", c.eval.interval);
    s.check_min("interval", c.eval.interval, 0);
    s.read("batches", c.eval.batches);
    s.check_min("batches", c.eval.batches, 0);
    s.finish();
  }
  {
    Section s = section("checkpoint");
    s.read("interval", c.checkpoint.interval);
    s.check_min("interval", c.checkpoint.interval, 0);
    s.read("keep", c.checkpoint.keep);
    s.check_min("keep", c.checkpoint.keep, 1);
    s.read("dir", c.checkpoint.dir);
    s.finish();
  }
  {
    Section s = section("binding");
    s.read("mode", c.binding.mode);
    s.check_enum("mode", c.binding.mode, kBindingModes);
    s.read("slots", c.binding.slots);
    s.check_min("slots", c.binding.slots, 1);
    s.read("slot", c.binding.slot);
    s.check_min("slot", c.binding.slot, 0);
    if (c.binding.slot >= c.binding.slots)
      s.ctx().fail("binding.slot", "expected a slot below binding.slots (" +
                                       std::to_string(c.binding.slots) + "), found " +
                                       std::to_string(c.binding.slot));
    s.read("fallback", c.binding.fallback);
    s.read("cpus", c.binding.cpus);
    s.finish();
  }
  top.read("threads", c.threads);
  top.check_min("threads", c.threads, 0);
  // Sections known but not asked for through top.get are registered here for suggestions.
  for (const auto& name : kSections)
    (void)top.get(name);
  top.finish();
  cross_check(ctx, c);
  return c;
}

RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ValueError("[config] " + path + ": cannot open the file for reading");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw ValueError("[config] " + path + ": error while reading the file");
  return parse_run_config(ss.str(), path, overrides);
}

namespace {

// One "key = value" line per call.
class Writer {
 public:
  void header(const std::string& name) {
    out_ << (out_.tellp() > 0 ? "\n" : "") << "[" << name << "]\n";
  }
  void kv(const std::string& k, const std::string& raw) {
    out_ << toml_key(k) << " = " << raw << "\n";
  }
  void str(const std::string& k, const std::string& s) { kv(k, quote(s)); }
  void num(const std::string& k, double v) { kv(k, fmt_double(v)); }
  void integer(const std::string& k, std::int64_t v) { kv(k, std::to_string(v)); }
  void flag(const std::string& k, bool v) { kv(k, v ? "true" : "false"); }
  std::string text() const { return out_.str(); }
  std::ostringstream& os() { return out_; }

 private:
  std::ostringstream out_;
};

// A field's value as TOML: floats always with a point or exponent.
std::string field_toml(const core::FieldSpec& f, const json& v) {
  if (f.type == core::FieldType::kFloat && v.is_number()) return fmt_double(v.get<double>());
  return json_to_toml_value(v);
}

void write_settings(Writer& w, const OptimizerSettings& o) {
  const auto kind = optim::optimizer_registry().at(o.kind);
  for (const auto& f : kind->fields)
    if (o.values.contains(f.key)) w.kv(f.key, field_toml(f, o.values.at(f.key)));
}

}  // namespace

std::string to_toml(const RunConfig& c) {
  Writer w;
  w.os() << "# TrainBench run configuration (effective: every key, defaults filled in)\n";
  w.integer("threads", c.threads);

  w.header("run");
  w.str("name", c.run.name);
  json tags = c.run.tags;
  w.kv("tags", json_to_toml_value(tags));
  w.kv("seed", std::to_string(c.run.seed));
  w.str("device", c.run.device);
  w.integer("steps", c.run.steps);
  w.integer("epochs", c.run.epochs);
  w.integer("log_interval", c.run.log_interval);
  w.integer("max_nonfinite", c.run.max_nonfinite);
  w.num("grad_clip", c.run.grad_clip);

  w.header("model");
  const json m = nn::to_json(c.model);
  w.kv("kind", json_to_toml_value(m.at("kind")));
  for (const auto& [k, v] : m.items())
    if (k != "kind") w.kv(k, json_to_toml_value(v));

  w.header("data");
  w.str("kind", c.data.kind);
  w.str("path", c.data.path);
  w.integer("batch_size", c.data.batch_size);
  w.integer("workers", c.data.workers);
  w.flag("shuffle", c.data.shuffle);
  w.flag("drop_last", c.data.drop_last);
  w.integer("context_length", c.data.context_length);
  w.num("val_fraction", c.data.val_fraction);
  w.flag("normalize", c.data.normalize);
  for (const auto& f : data::dataset_registry().at(c.data.kind)->fields)
    if (c.data.extra.contains(f.key)) w.kv(f.key, field_toml(f, c.data.extra.at(f.key)));

  w.header("optimizer");
  w.str("kind", c.optimizer.main.kind);
  const std::string rest = optim::optimizer_registry().at(c.optimizer.main.kind)->rest_kind;
  if (!rest.empty()) {
    json split = json::array();
    for (const auto& [glob, which] : c.optimizer.split)
      split.push_back({glob, which});
    w.kv("split", json_to_toml_value(split));
    w.header("optimizer." + c.optimizer.main.kind);
    write_settings(w, c.optimizer.main);
    w.header("optimizer." + rest);
    OptimizerSettings a = c.optimizer.adamw.value_or(OptimizerSettings(rest));
    if (a.kind != rest) a = OptimizerSettings(rest);
    write_settings(w, a);
  } else {
    write_settings(w, c.optimizer.main);
  }

  w.header("scheduler");
  const json& sc = c.scheduler.config;
  if (sc.is_null() || !sc.is_object()) {
    w.str("kind", "none");
  } else {
    if (sc.contains("kind")) w.kv("kind", json_to_toml_value(sc.at("kind")));
    for (const auto& [k, v] : sc.items())
      if (k != "kind") w.kv(k, json_to_toml_value(v));
  }

  w.header("amp");
  w.flag("enabled", c.amp.enabled);
  w.str("dtype", c.amp.dtype);
  w.flag("grad_scaler", c.amp.grad_scaler);
  w.flag("tf32", c.amp.tf32);

  w.header("swa");
  w.str("kind", c.swa.kind);
  w.num("ema_decay", c.swa.ema_decay);
  w.integer("start_step", c.swa.start_step);
  w.integer("every", c.swa.every);

  w.header("eval");
  w.integer("interval", c.eval.interval);
  w.integer("batches", c.eval.batches);

  w.header("checkpoint");
  w.integer("interval", c.checkpoint.interval);
  w.integer("keep", c.checkpoint.keep);
  w.str("dir", c.checkpoint.dir);

  w.header("binding");
  w.str("mode", c.binding.mode);
  w.integer("slot", c.binding.slot);
  w.integer("slots", c.binding.slots);
  w.flag("fallback", c.binding.fallback);
  w.str("cpus", c.binding.cpus);
  return w.text();
}

}  // namespace tb::train
