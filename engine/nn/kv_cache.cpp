#include "engine/nn/kv_cache.h"

#include <tuple>

#include "engine/core/error.h"

namespace tb::nn {

namespace {
thread_local KvCache* t_kv_cache = nullptr;
}  // namespace

KvCache::KvCache(std::int64_t capacity) : capacity_(capacity) {
  TB_CHECK(capacity > 0, "[nn] KvCache: capacity must be positive, got ", capacity);
}

void KvCache::clear() {
  length_ = 0;
  next_layer_ = 0;
}

std::pair<Tensor, Tensor> KvCache::append(const Tensor& k, const Tensor& v) {
  TB_CHECK(k.defined() && v.defined() && k.dim() == 4 && v.dim() == 4 && k.size(2) == v.size(2),
           "[nn] KvCache: keys and values must be [B, Hkv, T, D] with the same T");
  const std::int64_t t = k.size(2);
  TB_CHECK(length_ + t <= capacity_, "[nn] KvCache: ", length_, " cached positions and ", t,
           " new ones exceed the capacity ", capacity_);
  const std::size_t i = next_layer_++;
  if (i == layers_.size()) {
    TB_CHECK(length_ == 0, "[nn] KvCache: attention layer ", i,
             " appeared after the first forward (the model changed?)");
    auto buffer = [&](const Tensor& x) {
      return Tensor::empty({x.size(0), x.size(1), capacity_, x.size(3)}, x.dtype(), x.device());
    };
    layers_.emplace_back(buffer(k), buffer(v));
  }
  auto& [kb, vb] = layers_[i];
  auto fits = [&](const Tensor& buf, const Tensor& x) {
    return x.size(0) == buf.size(0) && x.size(1) == buf.size(1) && x.size(3) == buf.size(3) &&
           x.dtype() == buf.dtype() && x.device() == buf.device();
  };
  TB_CHECK(fits(kb, k) && fits(vb, v), "[nn] KvCache: layer ", i,
           " got keys or values of another batch, head count, head size, dtype or device than "
           "its first ones");
  kb.narrow(2, length_, t).copy_(k);
  vb.narrow(2, length_, t).copy_(v);
  return {kb.narrow(2, 0, length_ + t), vb.narrow(2, 0, length_ + t)};
}

void KvCache::commit(std::int64_t t) {
  TB_CHECK(next_layer_ == layers_.size(), "[nn] KvCache: ", next_layer_, " of ", layers_.size(),
           " attention layers appended in this forward");
  TB_CHECK(t >= 0 && length_ + t <= capacity_, "[nn] KvCache: cannot commit ", t, " positions to ",
           length_, " of ", capacity_);
  length_ += t;
  next_layer_ = 0;
}

ScopedKvCache::ScopedKvCache(KvCache& cache) : previous_(t_kv_cache) {
  cache.begin_forward();
  t_kv_cache = &cache;
}

ScopedKvCache::~ScopedKvCache() {
  t_kv_cache = previous_;
}

KvCache* current_kv_cache() {
  return t_kv_cache;
}

bool attend_to_cache(KvCache* cache, Tensor& k, Tensor& v, std::int64_t t,
                     const std::string& layer) {
  if (cache == nullptr) return true;
  // The causal mask of the fused op is aligned at the top left (query i sees keys j <= i): right
  // for a whole prefix (nothing cached yet), and one new position sees every cached key.
  TB_CHECK(cache->length() == 0 || t == 1, "[nn] ", layer,
           ": after the first forward, a key/value cache takes one position at a time, got ", t);
  const bool causal = cache->length() == 0;
  std::tie(k, v) = cache->append(k, v);
  return causal;
}

}  // namespace tb::nn
