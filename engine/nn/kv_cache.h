// A key/value cache for incremental decoding: each attention layer keeps the keys and values of
// the positions already seen, so that generating one more token runs the model over that token
// alone instead of over the whole window again — the `past` of OpenAI's GPT-2 code
// (openai/gpt-2 src/model.py) and Hugging Face's DynamicCache, with buffers allocated once for
// the context length.
//
// The model's forward signature stays as it is: a ScopedKvCache makes a cache current on the
// calling thread, and the attention layers that see one (CausalSelfAttention, GptBlock) read the
// first position from length(), rotate or embed at those positions, append their keys and values
// in call order, and attend over everything appended so far. A forward that sees no layer use the
// cache (a model without attention) leaves layers() at 0.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/tensor.h"

namespace tb::nn {

using core::Tensor;

/// The cache of one sequence batch; see the file comment.
class KvCache {
 public:
  /// Room for `capacity` positions (the model's context length) in every layer.
  explicit KvCache(std::int64_t capacity);

  /// Positions the cache holds (the first position of the next forward).
  std::int64_t length() const { return length_; }
  /// Positions it can hold.
  std::int64_t capacity() const { return capacity_; }
  /// Layers that have appended to it.
  std::size_t layers() const { return layers_.size(); }
  /// Forgets every position (the buffers are kept).
  void clear();

  /// Called by the next attention layer of the current forward: writes k and v
  /// ([B, Hkv, T, D], any strides) at positions [length(), length() + T) of that layer's buffers
  /// and returns views of all its positions so far, [B, Hkv, length() + T, D]. Beyond the
  /// capacity, or a shape other than the layer's first, is a tb::ValueError.
  std::pair<Tensor, Tensor> append(const Tensor& k, const Tensor& v);
  /// Ends a forward of `t` new positions: length() grows by t. Every layer that appended in
  /// the first forward must have appended again.
  void commit(std::int64_t t);

 private:
  friend class ScopedKvCache;
  void begin_forward() { next_layer_ = 0; }

  std::int64_t capacity_;
  std::int64_t length_ = 0;
  std::size_t next_layer_ = 0;
  std::vector<std::pair<Tensor, Tensor>> layers_;  // [B, Hkv, capacity, D] each
};

/// Makes `cache` current on this thread for one forward (the previous one again after).
class ScopedKvCache {
 public:
  /// Starts a forward: the first attention layer appends to the cache's layer 0.
  explicit ScopedKvCache(KvCache& cache);
  /// Restores the previous cache (or none).
  ~ScopedKvCache();
  ScopedKvCache(const ScopedKvCache&) = delete;
  ScopedKvCache& operator=(const ScopedKvCache&) = delete;

 private:
  KvCache* previous_;
};

/// The current thread's cache, or null outside a ScopedKvCache.
KvCache* current_kv_cache();

/// For an attention layer: with `cache` (the current thread's, or null), checks that this
/// forward of `t` positions can continue it, appends k and v, and replaces them with every cached
/// position's keys and values. Returns whether the attention is causal (a whole prefix, nothing
/// cached before) or not (one position after the cached ones, which sees them all). Without a
/// cache: true, k and v unchanged. `layer` names the caller in errors.
bool attend_to_cache(KvCache* cache, Tensor& k, Tensor& v, std::int64_t t,
                     const std::string& layer);

}  // namespace tb::nn
