#pragma once
// An insertion-ordered string-keyed dictionary (PyTorch's OrderedDict): state dicts, named
// parameters and named children keep the order in which things were registered.

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kiln/runtime/error.h"

namespace kiln::nn {

template <typename V>
class OrderedDict {
 public:
  using Item = std::pair<std::string, V>;
  using iterator = typename std::vector<Item>::iterator;
  using const_iterator = typename std::vector<Item>::const_iterator;

  OrderedDict() = default;
  OrderedDict(std::initializer_list<Item> items) {
    for (const auto& it : items) insert(it.first, it.second);
  }

  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  bool contains(const std::string& key) const { return index_.count(key) != 0; }

  // Adds a new key at the end; a duplicate key is an error.
  V& insert(std::string key, V value) {
    KILN_CHECK(!contains(key), "OrderedDict", "key '", key, "' already present");
    index_.emplace(key, items_.size());
    items_.emplace_back(std::move(key), std::move(value));
    return items_.back().second;
  }
  // Replaces the value of an existing key in place, or appends a new one.
  V& insert_or_assign(std::string key, V value) {
    auto it = index_.find(key);
    if (it != index_.end()) return items_[it->second].second = std::move(value);
    return insert(std::move(key), std::move(value));
  }
  bool erase(const std::string& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return false;
    items_.erase(items_.begin() + static_cast<std::ptrdiff_t>(it->second));
    index_.clear();
    for (size_t i = 0; i < items_.size(); ++i) index_.emplace(items_[i].first, i);
    return true;
  }

  V& at(const std::string& key) {
    auto it = index_.find(key);
    KILN_CHECK(it != index_.end(), "OrderedDict", "key '", key, "' not found");
    return items_[it->second].second;
  }
  const V& at(const std::string& key) const {
    auto it = index_.find(key);
    KILN_CHECK(it != index_.end(), "OrderedDict", "key '", key, "' not found");
    return items_[it->second].second;
  }
  V& operator[](const std::string& key) { return at(key); }
  const V& operator[](const std::string& key) const { return at(key); }
  V* find(const std::string& key) {
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &items_[it->second].second;
  }
  const V* find(const std::string& key) const {
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &items_[it->second].second;
  }

  Item& operator[](size_t i) { return items_.at(i); }
  const Item& operator[](size_t i) const { return items_.at(i); }

  std::vector<std::string> keys() const {
    std::vector<std::string> out;
    out.reserve(items_.size());
    for (const auto& it : items_) out.push_back(it.first);
    return out;
  }
  std::vector<V> values() const {
    std::vector<V> out;
    out.reserve(items_.size());
    for (const auto& it : items_) out.push_back(it.second);
    return out;
  }
  const std::vector<Item>& items() const { return items_; }

  iterator begin() { return items_.begin(); }
  iterator end() { return items_.end(); }
  const_iterator begin() const { return items_.begin(); }
  const_iterator end() const { return items_.end(); }

 private:
  std::vector<Item> items_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace kiln::nn
