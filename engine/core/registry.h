// Registry<Entry>: the one place a family of pluggable kinds (optimizers, LR schedulers, models,
// data sets) is listed. An entry is a struct with a `name` (the config's `kind`), its fields
// (core::FieldSpec) and its factory; the config reader and writer, the trainer, the GUI form,
// the CLI help and the config reference all walk the family's registry, so adding a kind is one
// entry. Thread-safe: add() takes a lock, lookups share it; entries are immutable once added.
#pragma once

#include <algorithm>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/error.h"
#include "engine/core/fields.h"

namespace tb::core {

/// The kinds of one family, in registration order; `Entry` has a `name` member.
template <typename Entry>
class Registry {
 public:
  /// `family` names the family in messages ("optimizer", "model.kind").
  explicit Registry(std::string family) : family_(std::move(family)) {}

  /// Adds a kind; a second entry of the same name, or an empty name, is a tb::ValueError.
  void add(Entry entry) {
    std::unique_lock lock(mutex_);
    TB_CHECK(!entry.name.empty(), "[", family_, "] a kind needs a name");
    for (const auto& e : entries_)
      TB_CHECK(e->name != entry.name, "[", family_, "] kind '", entry.name,
               "' is registered already");
    entries_.push_back(std::make_shared<const Entry>(std::move(entry)));
  }

  /// Removes a kind (tests that register a toy kind); returns whether it was there.
  bool remove(const std::string& name) {
    std::unique_lock lock(mutex_);
    const auto it = std::find_if(entries_.begin(), entries_.end(),
                                 [&](const auto& e) { return e->name == name; });
    if (it == entries_.end()) return false;
    entries_.erase(it);
    return true;
  }

  /// The entry named `name`, or null.
  std::shared_ptr<const Entry> find(const std::string& name) const {
    std::shared_lock lock(mutex_);
    for (const auto& e : entries_)
      if (e->name == name) return e;
    return nullptr;
  }

  /// The entry named `name`; an unknown name is a tb::ValueError listing the kinds and the
  /// nearest one.
  std::shared_ptr<const Entry> at(const std::string& name) const {
    if (auto e = find(name)) return e;
    const auto all = names();
    std::string list;
    for (const auto& n : all)
      list += (list.empty() ? "" : ", ") + n;
    throw ValueError("[" + family_ + "] unknown kind '" + name + "' (one of " + list +
                     "); did you mean '" + nearest_word(name, all) + "'?");
  }

  /// The kinds' names in registration order.
  std::vector<std::string> names() const {
    std::shared_lock lock(mutex_);
    std::vector<std::string> out;
    out.reserve(entries_.size());
    for (const auto& e : entries_)
      out.push_back(e->name);
    return out;
  }

  /// Every entry, in registration order.
  std::vector<std::shared_ptr<const Entry>> entries() const {
    std::shared_lock lock(mutex_);
    return entries_;
  }

  /// The family's name.
  const std::string& family() const { return family_; }

 private:
  std::string family_;
  mutable std::shared_mutex mutex_;
  std::vector<std::shared_ptr<const Entry>> entries_;
};

}  // namespace tb::core
