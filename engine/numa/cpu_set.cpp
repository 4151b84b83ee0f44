// CpuSet parsing, printing and set algebra.
#include "engine/numa/cpu_set.h"

#include <algorithm>
#include <charconv>
#include <iterator>

#include "engine/core/error.h"

namespace tb::numa {

namespace {

constexpr int kMaxCpuIndex = 1 << 16;

int parse_index(std::string_view part, std::string_view whole) {
  int v = -1;
  const auto* first = part.data();
  const auto* last = part.data() + part.size();
  const auto res = std::from_chars(first, last, v);
  TB_CHECK(!part.empty() && res.ec == std::errc() && res.ptr == last && v >= 0,
           "[numa] malformed CPU list '", whole, "': '", part,
           "' is not a non-negative integer (expected e.g. \"0-2,4,6-7\")");
  // Linux builds for at most 8192 CPUs (NR_CPUS with MAXSMP); an index past 65535 is a typo, and
  // a range up to it would be expanded one CPU at a time (gigabytes for "0-2147483647").
  TB_CHECK(v < kMaxCpuIndex, "[numa] malformed CPU list '", whole, "': CPU ", v,
           " is beyond the largest CPU number accepted (", kMaxCpuIndex - 1, ")");
  return v;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return s;
}

}  // namespace

CpuSet::CpuSet(std::initializer_list<int> cpus)
    : CpuSet(from_vector(std::vector<int>(cpus.begin(), cpus.end()))) {}

CpuSet CpuSet::from_vector(std::vector<int> cpus) {
  for (int c : cpus) {
    TB_CHECK(c >= 0, "[numa] CPU index ", c, " is negative");
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  CpuSet s;
  s.cpus_ = std::move(cpus);
  return s;
}

CpuSet CpuSet::range(int lo, int hi) {
  std::vector<int> v;
  for (int c = lo; c <= hi; ++c) {
    v.push_back(c);
  }
  return from_vector(std::move(v));
}

CpuSet CpuSet::parse(std::string_view text) {
  const std::string_view whole = trim(text);
  std::vector<int> out;
  std::string_view rest = whole;
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    const std::string_view part = trim(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    TB_CHECK(!part.empty(), "[numa] malformed CPU list '", whole, "': empty element");
    const auto dash = part.find('-');
    if (dash == std::string_view::npos) {
      out.push_back(parse_index(part, whole));
      continue;
    }
    const int lo = parse_index(trim(part.substr(0, dash)), whole);
    const int hi = parse_index(trim(part.substr(dash + 1)), whole);
    TB_CHECK(lo <= hi, "[numa] malformed CPU list '", whole, "': range '", part,
             "' runs backwards");
    for (int c = lo; c <= hi; ++c) {
      out.push_back(c);
    }
  }
  return from_vector(std::move(out));
}

std::string CpuSet::to_string() const {
  std::string out;
  std::size_t i = 0;
  while (i < cpus_.size()) {
    std::size_t j = i;
    while (j + 1 < cpus_.size() && cpus_[j + 1] == cpus_[j] + 1) {
      ++j;
    }
    if (!out.empty()) out += ',';
    out += std::to_string(cpus_[i]);
    if (j > i) {
      out += '-';
      out += std::to_string(cpus_[j]);
    }
    i = j + 1;
  }
  return out;
}

bool CpuSet::contains(int cpu) const {
  return std::binary_search(cpus_.begin(), cpus_.end(), cpu);
}

int CpuSet::min() const {
  TB_CHECK(!cpus_.empty(), "[numa] min() of an empty CPU set");
  return cpus_.front();
}

int CpuSet::max() const {
  TB_CHECK(!cpus_.empty(), "[numa] max() of an empty CPU set");
  return cpus_.back();
}

CpuSet CpuSet::operator&(const CpuSet& other) const {
  CpuSet r;
  std::set_intersection(cpus_.begin(), cpus_.end(), other.cpus_.begin(), other.cpus_.end(),
                        std::back_inserter(r.cpus_));
  return r;
}

CpuSet CpuSet::operator|(const CpuSet& other) const {
  CpuSet r;
  std::set_union(cpus_.begin(), cpus_.end(), other.cpus_.begin(), other.cpus_.end(),
                 std::back_inserter(r.cpus_));
  return r;
}

CpuSet CpuSet::operator-(const CpuSet& other) const {
  CpuSet r;
  std::set_difference(cpus_.begin(), cpus_.end(), other.cpus_.begin(), other.cpus_.end(),
                      std::back_inserter(r.cpus_));
  return r;
}

}  // namespace tb::numa
