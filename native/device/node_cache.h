// Keeps the nodes of erased map entries for the next insert. Every device allocation
// and free edits the memory pool's maps and the registry's id table; with std::map /
// std::unordered_map each insert is a malloc and each erase a free (about a dozen per
// op at a 64 x 64 matmul). extract() hands an erased entry's node back and insert() of
// a kept node allocates nothing, so steady alloc / free cycles reuse the same nodes.
// Up to kKeep nodes are kept: a loop that holds its outputs (a step's activations, a
// benchmark's 381 matmul results) frees hundreds of blocks in a row and allocates them
// again, and with 32 kept nodes all but 32 of those inserts were a malloc again. The
// nodes are small (two words and a link or two), so 1024 cost at most ~64 KiB a map.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace ascent {

template <class Map, size_t kKeep = 1024>
class NodeCache {
 public:
  NodeCache() { nodes_.reserve(32); }

  // m.emplace(key, value), with a kept node when there is one.
  template <class K, class V>
  void Insert(Map& m, K&& key, V&& value) {
    if (nodes_.empty()) {
      m.emplace(std::forward<K>(key), std::forward<V>(value));
      return;
    }
    typename Map::node_type node = std::move(nodes_.back());
    nodes_.pop_back();
    node.key() = std::forward<K>(key);
    node.mapped() = std::forward<V>(value);
    m.insert(std::move(node));
  }

  // m.erase(it), keeping the node (its value reset, so it holds nothing alive).
  void Erase(Map& m, typename Map::iterator it) {
    typename Map::node_type node = m.extract(it);
    if (nodes_.size() == kKeep) return;  // the node is freed here
    node.mapped() = typename Map::mapped_type{};
    nodes_.push_back(std::move(node));
  }

 private:
  std::vector<typename Map::node_type> nodes_;
};

}  // namespace ascent
