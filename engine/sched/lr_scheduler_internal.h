// Helpers shared by the LR scheduler sources (lr_scheduler*.cpp; not a public header: the one
// public header is lr_scheduler.h): PyTorch's explicit-epoch warning, pi, and the state_dict
// conversions (non-finite numbers stored as strings, typed reads whose errors name the class and
// the key).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <numbers>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/sched/lr_scheduler.h"

namespace tb::sched::internal {

using nlohmann::json;

inline constexpr double kPi = std::numbers::pi;

inline constexpr const char* kEpochDeprecation =
    "The epoch parameter in `scheduler.step()` was not necessary and is being deprecated where "
    "possible. Please use `scheduler.step()` to step the scheduler. During the deprecation, if "
    "epoch is different from None, the closed form is used instead of the new chainable form, "
    "where available. Please open an issue if you are unable to replicate your use case: "
    "https://github.com/pytorch/pytorch/issues/new/choose.";
// Numbers in JSON; non-finite values as strings (JSON has no inf/nan).
inline json num_json(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}
inline json nums_json(const std::vector<double>& v) {
  json a = json::array();
  for (double x : v)
    a.push_back(num_json(x));
  return a;
}

[[noreturn]] inline void bad_key(const std::string& who, const std::string& key, const char* what) {
  throw ValueError(detail::str_cat("[", who, "] state_dict entry '", key, "' must be ", what));
}

inline double num_from(const json& v, const std::string& who, const std::string& key) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    const auto s = v.get<std::string>();
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
  }
  bad_key(who, key, "a number");
}
inline std::int64_t int_from(const json& v, const std::string& who, const std::string& key) {
  if (!v.is_number_integer()) bad_key(who, key, "an integer");
  return v.get<std::int64_t>();
}
inline bool bool_from(const json& v, const std::string& who, const std::string& key) {
  if (!v.is_boolean()) bad_key(who, key, "true or false");
  return v.get<bool>();
}
inline std::string str_from(const json& v, const std::string& who, const std::string& key) {
  if (!v.is_string()) bad_key(who, key, "a string");
  return v.get<std::string>();
}
inline std::vector<double> nums_from(const json& v, const std::string& who,
                                     const std::string& key) {
  if (!v.is_array()) bad_key(who, key, "a list of numbers");
  std::vector<double> out;
  for (const auto& x : v)
    out.push_back(num_from(x, who, key));
  return out;
}
inline std::vector<std::int64_t> ints_from(const json& v, const std::string& who,
                                           const std::string& key) {
  if (!v.is_array()) bad_key(who, key, "a list of integers");
  std::vector<std::int64_t> out;
  for (const auto& x : v)
    out.push_back(int_from(x, who, key));
  return out;
}

// Loads `key` into `dst` when present.
template <typename T, typename F>
void load_if(const json& j, const std::string& key, T& dst, F conv, const std::string& who) {
  auto it = j.find(key);
  if (it != j.end()) dst = conv(*it, who, key);
}

inline bool defaults_have(const Optimizer& opt, const char* key) {
  return opt.defaults().count(key) != 0;
}

}  // namespace tb::sched::internal
