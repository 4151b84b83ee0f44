// Field specs: the description of one configurable key of a pluggable kind (an optimizer, a
// scheduler, a model, a data set) or of a run-config section — its key, type, default, allowed
// range or choices and a one-line help. The TOML reader validates against them, the effective
// config writer walks them, the GUI form takes types, choices and help from them, and the config
// reference is generated from them. Values travel as JSON (nlohmann::json): a kind's settings
// are one JSON object with every field present once read.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tb::core {

/// The type of a field's value.
enum class FieldType {
  kBool,        ///< true / false
  kInt,         ///< integer
  kFloat,       ///< number (an integer is accepted and read as a float)
  kString,      ///< string
  kIntList,     ///< array of integers
  kStringList,  ///< array of strings
  kAny,         ///< any TOML value checked by the kind itself (numbers or lists, expressions)
};

/// "bool", "int", "float", "string", "int list", "string list", "any".
const char* field_type_name(FieldType t);

/// One configurable key.
struct FieldSpec {
  std::string key;                     ///< "lr", "hidden", "T_max"
  FieldType type = FieldType::kFloat;  ///< value type
  nlohmann::json default_value;        ///< the default; null = required (no default)
  std::optional<double> min;           ///< lower bound (numbers)
  bool min_open = false;               ///< min excluded
  std::optional<double> max;           ///< upper bound (numbers)
  bool max_open = false;               ///< max excluded
  bool finite = false;                 ///< a float must be finite
  bool optional = false;               ///< no default, and none needed (PyTorch's None)
  std::vector<std::string> choices;    ///< allowed strings (empty = any)
  std::string type_text;               ///< how the docs name the type when not the plain one
  std::string allowed_text;            ///< how the docs state what is allowed, when not derivable
  std::string help;                    ///< one line: what it means

  /// A field of `type` named `key` with default `def` (null: required).
  FieldSpec(std::string key, FieldType type, nlohmann::json def, std::string help);

  /// Builder steps (each returns *this).
  FieldSpec& at_least(double v);                  ///< v <= value
  FieldSpec& above(double v);                     ///< v < value
  FieldSpec& at_most(double v);                   ///< value <= v
  FieldSpec& below(double v);                     ///< value < v
  FieldSpec& finite_only();                       ///< no inf/nan
  FieldSpec& one_of(std::vector<std::string> c);  ///< the allowed strings
  FieldSpec& documented_as(std::string type_text,
                           std::string allowed_text = "");  ///< reference texts
  FieldSpec& may_be_absent();                               ///< optional without a default (None)

  /// Whether a value must be given (no default).
  bool required() const { return default_value.is_null() && !optional; }

  /// Checks a value already of the right type against range and choices; returns the problem
  /// ("expected an integer >= 1, found 0", "expected one of \"a\", \"b\", found \"c\"; did you
  /// mean \"a\"?") or nullopt when the value is allowed.
  std::optional<std::string> check(const nlohmann::json& value) const;

  /// What the reference shows as "allowed": ">= 0", "in [0, 1)", "a, b, c", or allowed_text.
  std::string allowed() const;
  /// The type as the reference shows it ("number", "integer", "array of strings", ...).
  std::string type_doc() const;
  /// The default as TOML text ("1e-3" style numbers as written by the effective config).
  std::string default_toml() const;
};

/// The field named `key` of `fields`, or null.
const FieldSpec* find_field(const std::vector<FieldSpec>& fields, const std::string& key);

/// The keys of `fields`, in order.
std::vector<std::string> field_keys(const std::vector<FieldSpec>& fields);

/// An object with every field that has a default set to it.
nlohmann::json default_values(const std::vector<FieldSpec>& fields);

/// A problem with one field of a kind's settings, raised by a kind's own checks (the config
/// reader turns it into a config error at that field's key path).
struct FieldProblem {
  std::string key;      ///< the field ("nesterov"), relative to the kind's table
  std::string message;  ///< "expected false when momentum is 0 ..."
};

/// Shortest text that reads back to the same double, always a TOML float ("1.0", "1e-08").
std::string format_double(double v);
/// A TOML basic string with escapes ("a\"b").
std::string quote_string(const std::string& s);
/// A JSON value as one-line TOML (objects as inline tables, "kind" first).
std::string json_to_toml(const nlohmann::json& j);
/// "a", "a or b", "a, b or c".
std::string join_or(const std::vector<std::string>& items);
/// The candidate nearest to `word`: the shortest one that `word` begins (a name cut short), else
/// the nearest by edit distance (first on ties); "" when there is none.
std::string nearest_word(const std::string& word, const std::vector<std::string>& candidates);
/// nearest_word() when it is close enough to be a likely typo of `word` (one begins the other, or
/// at most a third of the letters changed, and at least 1), else "": "d_model" is not a typo of
/// "hidden", and suggesting it would mislead.
std::string close_word(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace tb::core
