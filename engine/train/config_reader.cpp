// The run-config reader's context, TOML -> JSON and --set overrides (see config_reader.h).
#include "engine/train/config_reader.h"

#include <cctype>
#include <charconv>

namespace tb::train::detail {

ConfigProblem Ctx::problem(const std::string& path, const std::string& message) const {
  ConfigProblem p;
  p.source = source;
  p.key_path = path;
  p.message = message;
  if (root == nullptr || path.empty()) return p;
  // The key's own node, else the nearest enclosing table that exists (a missing key's table).
  std::string at = path;
  while (!at.empty()) {
    const toml::node* n = toml::at_path(*root, at).node();
    if (n != nullptr) {
      const auto& begin = n->source().begin;
      if (begin.line > 0) {
        p.line = static_cast<int>(begin.line);
        p.column = static_cast<int>(begin.column);
      }
      return p;
    }
    const auto cut = at.find_last_of(".[");
    at = cut == std::string::npos ? "" : at.substr(0, cut);
  }
  return p;
}

namespace {

// Whether `text` names `word` as a whole identifier ("n_heads 3", not "n_heads_kv").
bool names_word(const std::string& text, const std::string& word) {
  const auto ident = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
  };
  for (auto at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) {
    const std::size_t end = at + word.size();
    if ((at == 0 || !ident(text[at - 1])) && (end == text.size() || !ident(text[end]))) return true;
  }
  return false;
}

}  // namespace

void Ctx::fail(const std::string& path, const std::string& what,
               const std::string& key_path) const {
  // The override that set the key at fault (not any override under `path`: a --set of one field
  // does not cause another field's error). A key the file gave for a kind that --set changed
  // says so, and how to replace the whole table.
  std::string from = origin(key_path.empty() ? path : key_path);
  if (from.empty()) from = kind_hint(key_path.empty() ? path : key_path);
  const std::string message = what + from;
  throw ConfigError(problem(key_path.empty() ? path : key_path, message),
                    "[config] " + source + ": " + path + ": " + message);
}

void Ctx::fail_kind(const std::string& table, const Error& e) const {
  const auto* field = dynamic_cast<const FieldError*>(&e);
  const std::string key = field ? table + "." + field->field() : table;
  const std::string what = e.what();
  if (origin(key).empty() && kind_hint(key).empty()) {
    for (auto it = overrides.rbegin(); it != overrides.rend(); ++it) {
      if (it->first.rfind(table + ".", 0) != 0 || it->first == key) continue;
      if (!names_word(what, it->first.substr(table.size() + 1))) continue;
      const std::string message = what + " (from --set " + it->first + "=" + it->second + ")";
      throw ConfigError(problem(key, message),
                        "[config] " + source + ": " + table + ": " + message);
    }
  }
  fail(table, what, key);
}

void Ctx::fail_at(const std::string& path, const std::string& what) const {
  throw ConfigError(problem(path, what), "[config] " + source + ": " + what);
}

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

namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

}  // namespace

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
    // An integer beyond 64 bits is said so, not taken as a word ("007" and "1_" stay words).
    const std::size_t sign = !raw.empty() && (raw[0] == '+' || raw[0] == '-') ? 1 : 0;
    const std::string digits = raw.substr(sign);
    std::int64_t ignored = 0;
    if (!digits.empty() && digits[0] != '0' &&
        digits.find_first_not_of("0123456789") == std::string::npos &&
        std::from_chars(digits.data(), digits.data() + digits.size(), ignored).ec ==
            std::errc::result_out_of_range)
      ctx.fail_plain("--set " + text + ": " + raw +
                     (raw[0] == '-' ? " is smaller than the smallest integer (-2^63)"
                                    : " is larger than the largest integer (2^63 - 1)"));
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
      ctx.fail_at(path, "--set " + text + ": '" + path + "' is " + describe(*n) + ", not a table");
    }
    t = n->as_table();
  }
  doc["v"].node()->visit([&](const auto& v) { t->insert_or_assign(parts.back(), v); });
  ctx.overrides.emplace_back(key, raw);
}

}  // namespace tb::train::detail

namespace tb::train {

using nlohmann::json;

json setting_value(const std::string& raw) {
  try {
    const toml::table doc =
        toml::parse(std::string_view("v = " + raw + "\n"), std::string_view("setting"));
    if (doc.size() == 1 && doc.get("v") != nullptr) {
      const detail::Ctx ctx{"setting", {}, &doc};
      return detail::toml_to_json(ctx, "v", *doc.get("v"));
    }
  } catch (const toml::parse_error&) {
  } catch (const ConfigError&) {  // a date or time: not a setting's value
  }
  json v = json::parse(raw, nullptr, false);
  return v.is_discarded() ? json(raw) : v;
}

json settings_object(const std::string& kind, const std::vector<std::string>& settings,
                     const std::string& what) {
  json j;
  j["kind"] = kind;
  for (const auto& s : settings) {
    const auto eq = s.find('=');
    TB_CHECK(eq != std::string::npos && eq > 0, "[", what, "] setting '", s,
             "' must look like field=value");
    j[s.substr(0, eq)] = setting_value(s.substr(eq + 1));
  }
  return j;
}

}  // namespace tb::train
