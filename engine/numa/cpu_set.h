// CpuSet: a sorted set of logical CPU (or NUMA node) indices and its compact text form
// ("0-2,16-18"), as used by Linux cpulists, numactl(8) and PyTorch's torch/numa/binding.py.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace tb::numa {

/// A set of non-negative indices, kept sorted and without duplicates.
class CpuSet {
 public:
  CpuSet() = default;
  /// The given indices (any order, duplicates allowed). Throws tb::ValueError on a negative one.
  CpuSet(std::initializer_list<int> cpus);
  /// Same as the initializer-list form, from a vector.
  static CpuSet from_vector(std::vector<int> cpus);
  /// The indices lo..hi inclusive; empty when hi < lo.
  static CpuSet range(int lo, int hi);
  /// Parses a Linux cpulist ("0-2,4,6-7", "" = empty; spaces and a trailing newline are
  /// ignored). Throws tb::ValueError "[numa] ..." naming the text on malformed input.
  static CpuSet parse(std::string_view text);

  /// The compact sorted form: consecutive runs as "a-b", single values as "a", joined by ",".
  /// The empty set prints as "".
  std::string to_string() const;

  bool empty() const { return cpus_.empty(); }
  std::size_t size() const { return cpus_.size(); }
  bool contains(int cpu) const;
  /// Smallest index. Throws tb::ValueError when empty.
  int min() const;
  /// Largest index. Throws tb::ValueError when empty.
  int max() const;
  /// The indices in ascending order.
  const std::vector<int>& cpus() const { return cpus_; }
  auto begin() const { return cpus_.begin(); }
  auto end() const { return cpus_.end(); }

  /// Set intersection.
  CpuSet operator&(const CpuSet& other) const;
  /// Set union.
  CpuSet operator|(const CpuSet& other) const;
  /// Set difference (this minus other).
  CpuSet operator-(const CpuSet& other) const;
  bool operator==(const CpuSet& other) const = default;

 private:
  std::vector<int> cpus_;
};

}  // namespace tb::numa
