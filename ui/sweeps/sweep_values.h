// The sweep view's helpers shared by its files (sweep_view.cpp, sweep_parallel.cpp): a swept
// key's values as numbers and as text. Internal to ui/sweeps.
#pragma once

#include <QString>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/api/sweep_api.h"

namespace tb::ui::sweep_values {

// Pixels between a parallel-coordinates axis and its value labels.
constexpr int kValueGap = 6;

// A TOML value's number, if it is one ("0.02", "3", "1e-3"; not "\"muon\"" or "true").
inline std::optional<double> numberOf(const std::string& toml) {
  bool ok = false;
  const double v = QString::fromStdString(toml).toDouble(&ok);
  if (!ok || !std::isfinite(v)) return std::nullopt;
  return v;
}

// A TOML value for display: strings without their quotes.
inline QString display(const std::string& toml) {
  QString s = QString::fromStdString(toml);
  if (s.size() >= 2 && s.startsWith(QLatin1Char('"')) && s.endsWith(QLatin1Char('"')))
    s = s.mid(1, s.size() - 2);
  return s;
}

// A point's swept (key, value) pairs (none for an unknown point).
inline const std::vector<std::pair<std::string, std::string>>& valuesOf(
    const api::SweepResult& sweep, std::int64_t point) {
  static const std::vector<std::pair<std::string, std::string>> none;
  const auto i = static_cast<std::size_t>(point);
  return i < sweep.plan.points.size() ? sweep.plan.points[i] : none;
}

// Whether every value `key` takes in the sweep is a number.
inline bool numericKey(const api::SweepResult& sweep, const std::string& key) {
  bool any = false;
  for (const auto& point : sweep.plan.points)
    for (const auto& [k, v] : point)
      if (k == key) {
        if (!numberOf(v)) return false;
        any = true;
      }
  return any;
}

// A number as the sweep view writes it (5 significant digits).
inline QString number(double v) {
  return QString::number(v, 'g', 5);
}

}  // namespace tb::ui::sweep_values
