// Helpers of the model kinds' typed configs: reading a field from the kind's JSON and checking a
// value, both failing with a tb::FieldError that names the field.
#pragma once

#include <nlohmann/json.hpp>
#include <utility>

#include "engine/core/error.h"

namespace tb::nn::fields {

/// Throws tb::FieldError naming `field` when `cond` is false; the message is the concatenation
/// of `args` (as the kind words it, e.g. "gpt: n_heads must be positive, got 0").
template <typename... Args>
void check(bool cond, const char* field, Args&&... args) {
  if (!cond) throw FieldError(field, tb::detail::str_cat(std::forward<Args>(args)...));
}

/// Reads field `key` of `j` into `out` when present; a value of the wrong type is a
/// tb::FieldError "<model>: field '<key>' has the wrong type (<type>): <value>".
template <typename T>
void read(const nlohmann::json& j, const char* model, const char* key, T& out) {
  auto it = j.find(key);
  if (it == j.end()) return;
  try {
    out = it->get<T>();
  } catch (const nlohmann::json::exception&) {
    throw FieldError(key, tb::detail::str_cat(model, ": field '", key, "' has the wrong type (",
                                              it->type_name(), "): ", it->dump()));
  }
}

}  // namespace tb::nn::fields
