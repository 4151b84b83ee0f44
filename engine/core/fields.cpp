// Field specs: range and choice checks with the config reader's message grammar, the reference
// texts, and the TOML formatting helpers the reader, the writer and the docs share.
#include "engine/core/fields.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

#include "engine/core/error.h"

namespace tb::core {

const char* field_type_name(FieldType t) {
  switch (t) {
    case FieldType::kBool:
      return "bool";
    case FieldType::kInt:
      return "int";
    case FieldType::kFloat:
      return "float";
    case FieldType::kString:
      return "string";
    case FieldType::kIntList:
      return "int list";
    case FieldType::kStringList:
      return "string list";
    case FieldType::kAny:
      return "any";
  }
  return "any";
}

FieldSpec::FieldSpec(std::string k, FieldType t, nlohmann::json def, std::string h)
    : key(std::move(k)), type(t), default_value(std::move(def)), help(std::move(h)) {}

FieldSpec& FieldSpec::at_least(double v) {
  min = v;
  min_open = false;
  return *this;
}
FieldSpec& FieldSpec::above(double v) {
  min = v;
  min_open = true;
  return *this;
}
FieldSpec& FieldSpec::at_most(double v) {
  max = v;
  max_open = false;
  return *this;
}
FieldSpec& FieldSpec::below(double v) {
  max = v;
  max_open = true;
  return *this;
}
FieldSpec& FieldSpec::finite_only() {
  finite = true;
  return *this;
}
FieldSpec& FieldSpec::one_of(std::vector<std::string> c) {
  choices = std::move(c);
  return *this;
}
FieldSpec& FieldSpec::may_be_absent() {
  optional = true;
  return *this;
}
FieldSpec& FieldSpec::documented_as(std::string t, std::string a) {
  type_text = std::move(t);
  allowed_text = std::move(a);
  return *this;
}

namespace {

std::string join_quoted(const std::vector<std::string>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i)
    s += (i ? ", " : "") + quote_string(v[i]);
  return s;
}

std::string fmt_int(double v) {
  return std::to_string(static_cast<std::int64_t>(v));
}

}  // namespace

std::optional<std::string> FieldSpec::check(const nlohmann::json& v) const {
  if (!choices.empty() && v.is_string()) {
    const auto s = v.get<std::string>();
    if (std::find(choices.begin(), choices.end(), s) != choices.end()) return std::nullopt;
    return "expected one of " + join_quoted(choices) + ", found " + quote_string(s) +
           "; did you mean " + quote_string(nearest_word(s, choices)) + "?";
  }
  if (type == FieldType::kInt && v.is_number_integer()) {
    const auto i = v.get<std::int64_t>();
    if (min && static_cast<double>(i) < *min)
      return "expected an integer >= " + fmt_int(*min) + ", found " + std::to_string(i);
    if (max && static_cast<double>(i) > *max)
      return "expected an integer <= " + fmt_int(*max) + ", found " + std::to_string(i);
    return std::nullopt;
  }
  if (type == FieldType::kFloat && v.is_number()) {
    const double d = v.get<double>();
    if (min && max) {
      const bool ok = (min_open ? d > *min : d >= *min) && (max_open ? d < *max : d <= *max);
      if (!ok)
        return std::string("expected a number in ") + (min_open ? "(" : "[") + format_double(*min) +
               ", " + format_double(*max) + (max_open ? ")" : "]") + ", found " + format_double(d);
      return std::nullopt;
    }
    if (min) {  // a lower bound alone: the value must also be finite
      if (!(min_open ? d > *min : d >= *min) || !std::isfinite(d))
        return "expected a finite number " + std::string(min_open ? "> " : ">= ") +
               format_double(*min) + ", found " + format_double(d);
      return std::nullopt;
    }
    if (finite && !std::isfinite(d)) return "expected a finite number, found " + format_double(d);
  }
  return std::nullopt;
}

std::string FieldSpec::allowed() const {
  if (!allowed_text.empty()) return allowed_text;
  if (!choices.empty()) {
    std::string s;
    for (std::size_t i = 0; i < choices.size(); ++i)
      s += (i ? ", " : "") + ("`" + choices[i] + "`");
    return s;
  }
  auto num = [](double v) {  // 0, 1, 0.5, 1e-08: the shortest text, no trailing ".0"
    std::string t = format_double(v);
    if (t.size() > 2 && t.compare(t.size() - 2, 2, ".0") == 0) t.resize(t.size() - 2);
    return t;
  };
  if (min && max)
    return std::string("in ") + (min_open ? "(" : "[") + num(*min) + ", " + num(*max) +
           (max_open ? ")" : "]");
  if (min) return std::string(min_open ? "> " : ">= ") + num(*min);
  if (max) return std::string(max_open ? "< " : "<= ") + num(*max);
  return "";
}

std::string FieldSpec::type_doc() const {
  if (!type_text.empty()) return type_text;
  switch (type) {
    case FieldType::kBool:
      return "boolean";
    case FieldType::kInt:
      return "integer";
    case FieldType::kFloat:
      return "number";
    case FieldType::kString:
      return "string";
    case FieldType::kIntList:
      return "array of integers";
    case FieldType::kStringList:
      return "array of strings";
    case FieldType::kAny:
      return "value";
  }
  return "value";
}

std::string FieldSpec::default_toml() const {
  if (default_value.is_null()) return "";
  if (type == FieldType::kFloat && default_value.is_number())
    return format_double(default_value.get<double>());
  return json_to_toml(default_value);
}

const FieldSpec* find_field(const std::vector<FieldSpec>& fields, const std::string& key) {
  for (const auto& f : fields)
    if (f.key == key) return &f;
  return nullptr;
}

std::vector<std::string> field_keys(const std::vector<FieldSpec>& fields) {
  std::vector<std::string> out;
  out.reserve(fields.size());
  for (const auto& f : fields)
    out.push_back(f.key);
  return out;
}

nlohmann::json default_values(const std::vector<FieldSpec>& fields) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& f : fields)
    if (!f.default_value.is_null()) j[f.key] = f.default_value;
  return j;
}

std::string format_double(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  std::string s(buf, res.ptr);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

std::string quote_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

namespace {

// A key as written in TOML: bare when it can be, else quoted.
std::string toml_key(const std::string& k) {
  const bool bare = !k.empty() && std::all_of(k.begin(), k.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
  return bare ? k : quote_string(k);
}

}  // namespace

std::string json_to_toml(const nlohmann::json& j) {
  using nlohmann::json;
  switch (j.type()) {
    case json::value_t::boolean:
      return j.get<bool>() ? "true" : "false";
    case json::value_t::number_integer:
      return std::to_string(j.get<std::int64_t>());
    case json::value_t::number_unsigned:
      return std::to_string(j.get<std::uint64_t>());
    case json::value_t::number_float:
      return format_double(j.get<double>());
    case json::value_t::string:
      return quote_string(j.get<std::string>());
    case json::value_t::array: {
      std::string s = "[";
      for (std::size_t i = 0; i < j.size(); ++i)
        s += (i ? ", " : "") + json_to_toml(j[i]);
      return s + "]";
    }
    case json::value_t::object: {
      if (j.empty()) return "{}";
      std::string s = "{ ";
      bool first = true;
      if (j.contains("kind")) {  // "kind" first, for readability
        s += "kind = " + json_to_toml(j.at("kind"));
        first = false;
      }
      for (const auto& [k, v] : j.items()) {
        if (k == "kind") continue;
        s += (first ? "" : ", ") + toml_key(k) + " = " + json_to_toml(v);
        first = false;
      }
      return s + " }";
    }
    default:
      throw InternalError("[config] a null value cannot be written as TOML");
  }
}

namespace {

// Edit distance with adjacent transpositions (the "optimal string alignment" distance): a typed
// "shwo" is one edit from "show", as a person sees it, not two.
// https://en.wikipedia.org/wiki/Damerau%E2%80%93Levenshtein_distance#Optimal_string_alignment_distance
// Letters compare without case: "tmax" is one slip from "T_max", not two.
std::size_t edit_distance(const std::string& a, const std::string& b) {
  auto same = [](char x, char y) {
    return std::tolower(static_cast<unsigned char>(x)) ==
           std::tolower(static_cast<unsigned char>(y));
  };
  std::vector<std::size_t> before(b.size() + 1), prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j)
    prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t sub = prev[j - 1] + (same(a[i - 1], b[j - 1]) ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
      if (i > 1 && j > 1 && same(a[i - 1], b[j - 2]) && same(a[i - 2], b[j - 1]))
        cur[j] = std::min(cur[j], before[j - 2] + 1);
    }
    std::swap(before, prev);
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

std::string join_or(const std::vector<std::string>& items) {
  std::string s;
  for (std::size_t i = 0; i < items.size(); ++i)
    s += (i == 0 ? "" : i + 1 == items.size() ? " or " : ", ") + items[i];
  return s;
}

std::string nearest_word(const std::string& word, const std::vector<std::string>& candidates) {
  // A name cut short ("eval.acc") means the candidate it begins, however many letters are missing
  // (edit distance alone would prefer the shorter "eval.loss"): the shortest such candidate.
  std::string begun;
  if (!word.empty())
    for (const auto& c : candidates)
      if (c.size() > word.size() && c.rfind(word, 0) == 0 &&
          (begun.empty() || c.size() < begun.size()))
        begun = c;
  if (!begun.empty()) return begun;
  std::string best;
  std::size_t best_d = std::numeric_limits<std::size_t>::max();
  for (const auto& c : candidates) {
    const std::size_t d = edit_distance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

std::string close_word(const std::string& word, const std::vector<std::string>& candidates) {
  const std::string best = nearest_word(word, candidates);
  if (best.empty()) return best;
  // One begins the other: a name cut short ("eval.acc") or one with a suffix ("lr_max").
  const bool shorter = best.size() < word.size();
  if (!word.empty() && (shorter ? word.rfind(best, 0) : best.rfind(word, 0)) == 0) return best;
  const std::size_t limit = std::max<std::size_t>(1, std::max(word.size(), best.size()) / 3);
  return edit_distance(word, best) <= limit ? best : std::string();
}

}  // namespace tb::core
