// CPU kernels of the fused scaled dot-product attention (forward and backward), flash-style: the
// scores of at most kTile query rows of one head at a time, never the [B, H, T, S] matrix. Each
// tile is three or five small GEMMs (the configured GEMM backend, on the strided rows as they
// are: leading dimensions, no copies) around a row softmax in float32 (float64 for float64). The
// forward keeps each row's log-sum-exp; the backward recomputes the probabilities from it, one
// task per (batch, key/value head) so grouped-query gradients accumulate without atomics and the
// result does not depend on the thread count. 16-bit inputs are computed in float32.
#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <type_traits>
#include <vector>

#include "engine/backends/cpu/blas.h"
#include "engine/backends/cpu/capability_kernels.h"
#include "engine/backends/cpu/vec_math.h"
#include "engine/dispatch/op_signatures.h"

namespace tb::cpu::TB_CPU_CAPABILITY {

using core::ScalarType;
namespace sig = ops::sig;

namespace {

constexpr std::int64_t kTile = 64;  // query rows per tile

// Rows of one (batch, head) of a [B, heads, length, width] tensor with unit stride in width:
// row l starts at p + l·ld.
template <typename C>
struct HeadRows {
  const C* p;
  std::int64_t ld;
};

// A [B, heads, length, width] float tensor addressed per head.
template <typename C>
struct Heads {
  const C* p;
  std::int64_t sb, sh, ld;
  explicit Heads(const Tensor& t)
      : p(static_cast<const C*>(t.data_ptr())),
        sb(t.stride(0)),
        sh(t.stride(1)),
        // One row per head: its stride is never stepped, but GEMM wants ld >= the width.
        ld(t.size(2) <= 1 ? std::max<std::int64_t>(1, t.size(3)) : t.stride(2)) {}
  HeadRows<C> at(std::int64_t b, std::int64_t h) const { return {p + b * sb + h * sh, ld}; }
};

// GEMM needs row strides >= the width: rows that overlap (a broadcast position) are copied.
Tensor gemm_rows(const Tensor& t, ScalarType ct) {
  Tensor c = t.dtype() == ct ? t : t.to(ct);
  if (c.size(2) > 1 && c.stride(2) < std::max<std::int64_t>(1, c.size(3))) c = c.contiguous();
  if (c.size(3) > 1 && c.stride(3) != 1) c = c.contiguous();
  return c;
}

struct Dims {
  std::int64_t b, h, t, d, hkv, s, e, group;
  Dims(const Tensor& q, const Tensor& k, const Tensor& v)
      : b(q.size(0)),
        h(q.size(1)),
        t(q.size(2)),
        d(q.size(3)),
        hkv(k.size(1)),
        s(k.size(2)),
        e(v.size(3)),
        group(k.size(1) > 0 ? q.size(1) / k.size(1) : 1) {}
  std::int64_t tiles() const { return (t + kTile - 1) / kTile; }
  // Keys row i attends to: [0, key_end(i)).
  std::int64_t key_end(std::int64_t i, bool causal) const {
    return causal ? std::min(i + 1, s) : s;
  }
};

ScalarType compute_dtype(ScalarType dt) {
  return dt == ScalarType::Float64 ? ScalarType::Float64 : ScalarType::Float32;
}

// sc := scale · Q[i0, i0+rows) · K[0, kend)ᵀ, then each row turned into probabilities: exp(s − m)
// with the row max m (forward: lse null, m and l returned in lse_out/l_out) or exp(s − lse_i)
// (backward); keys past the causal end are 0.
template <typename C>
void probabilities(const Dims& n, bool causal, C scale, HeadRows<C> q, HeadRows<C> k,
                   std::int64_t i0, std::int64_t rows, std::int64_t kend, C* sc, const C* lse_in,
                   C* lse_out, C* l_out) {
  gemm(false, true, rows, kend, n.d, scale, q.p + i0 * q.ld, q.ld, k.p, k.ld, C(0), sc, kend);
  for (std::int64_t r = 0; r < rows; ++r) {
    C* row = sc + r * kend;
    const std::int64_t jend = n.key_end(i0 + r, causal);
    C m;
    if (lse_in != nullptr) {
      m = lse_in[r];
    } else {
      m = -std::numeric_limits<C>::infinity();
      for (std::int64_t j = 0; j < jend; ++j)
        m = std::max(m, row[j]);
    }
    // The exponentials first (a loop the compiler vectorises), then their sum in order.
    for (std::int64_t j = 0; j < jend; ++j) {
      if constexpr (std::is_same_v<C, float>) {
        row[j] = exp_f32(row[j] - m);
      } else {
        row[j] = std::exp(row[j] - m);
      }
    }
    C l = 0;
    for (std::int64_t j = 0; j < jend; ++j)
      l += row[j];
    std::fill(row + jend, row + kend, C(0));
    if (l_out != nullptr) {
      l_out[r] = l;
      lse_out[r] = m + std::log(l);
    }
  }
}

template <typename C>
void attention_forward(const Dims& n, const Tensor& q, const Tensor& k, const Tensor& v, C scale,
                       bool causal, Tensor& out, Tensor& lse) {
  const Heads<C> qh(q), kh(k), vh(v);
  C* op = out.data_ptr<C>();
  C* lp = lse.data_ptr<C>();
  const std::int64_t tiles = n.tiles();
  const std::int64_t work = kTile * n.s * (n.d + n.e);
  parallel_gemm_items(
      n.b * n.h * tiles, std::max<std::int64_t>(1, (1 << 20) / std::max<std::int64_t>(1, work)),
      [&](std::int64_t w0, std::int64_t w1) {
        std::vector<C> sc;
        std::vector<C> l(kTile);
        for (std::int64_t w = w0; w < w1; ++w) {
          const std::int64_t bh = w / tiles;
          const std::int64_t b = bh / n.h;
          const std::int64_t h = bh % n.h;
          const std::int64_t i0 = (w % tiles) * kTile;
          const std::int64_t rows = std::min(kTile, n.t - i0);
          const std::int64_t kend = causal ? std::min(n.s, i0 + rows) : n.s;
          C* o = op + (bh * n.t + i0) * n.e;
          C* lse_rows = lp + bh * n.t + i0;
          if (kend == 0) {  // no keys: an empty sum (zeros), log-sum-exp -inf
            std::fill(o, o + rows * n.e, C(0));
            std::fill(lse_rows, lse_rows + rows, -std::numeric_limits<C>::infinity());
            continue;
          }
          sc.resize(static_cast<std::size_t>(rows * kend));
          const HeadRows<C> vr = vh.at(b, h / n.group);
          probabilities(n, causal, scale, qh.at(b, h), kh.at(b, h / n.group), i0, rows, kend,
                        sc.data(), static_cast<const C*>(nullptr), lse_rows, l.data());
          gemm(false, false, rows, n.e, kend, C(1), sc.data(), kend, vr.p, vr.ld, C(0), o, n.e);
          for (std::int64_t r = 0; r < rows; ++r) {
            for (std::int64_t c = 0; c < n.e; ++c)
              o[r * n.e + c] /= l[static_cast<std::size_t>(r)];
          }
        }
      });
}

template <typename C>
void attention_backward(const Dims& n, const Tensor& g, const Tensor& q, const Tensor& k,
                        const Tensor& v, const Tensor& out, const Tensor& lse, C scale, bool causal,
                        Tensor& dq, Tensor& dk, Tensor& dv) {
  const Heads<C> qh(q), kh(k), vh(v), gh(g), oh(out);
  const C* lp = lse.data_ptr<C>();
  C* dqp = dq.data_ptr<C>();
  C* dkp = dk.data_ptr<C>();
  C* dvp = dv.data_ptr<C>();
  // One task per (batch, key/value head): its query heads' tiles accumulate into its dk, dv.
  parallel_gemm_items(n.b * n.hkv, 1, [&](std::int64_t w0, std::int64_t w1) {
    std::vector<C> p;
    std::vector<C> ds;
    std::vector<C> drow(kTile);
    for (std::int64_t w = w0; w < w1; ++w) {
      const std::int64_t b = w / n.hkv;
      const std::int64_t hk = w % n.hkv;
      C* dkw = dkp + w * n.s * n.d;
      C* dvw = dvp + w * n.s * n.e;
      std::fill(dkw, dkw + n.s * n.d, C(0));
      std::fill(dvw, dvw + n.s * n.e, C(0));
      const HeadRows<C> kr = kh.at(b, hk);
      const HeadRows<C> vr = vh.at(b, hk);
      for (std::int64_t h = hk * n.group; h < (hk + 1) * n.group; ++h) {
        const HeadRows<C> qr = qh.at(b, h);
        const HeadRows<C> gr = gh.at(b, h);
        const HeadRows<C> orow = oh.at(b, h);
        const C* lse_h = lp + (b * n.h + h) * n.t;
        C* dqh = dqp + (b * n.h + h) * n.t * n.d;
        for (std::int64_t i0 = 0; i0 < n.t; i0 += kTile) {
          const std::int64_t rows = std::min(kTile, n.t - i0);
          const std::int64_t kend = causal ? std::min(n.s, i0 + rows) : n.s;
          if (kend == 0) {
            std::fill(dqh + i0 * n.d, dqh + (i0 + rows) * n.d, C(0));
            continue;
          }
          p.resize(static_cast<std::size_t>(rows * kend));
          ds.resize(static_cast<std::size_t>(rows * kend));
          probabilities(n, causal, scale, qr, kr, i0, rows, kend, p.data(), lse_h + i0,
                        static_cast<C*>(nullptr), static_cast<C*>(nullptr));
          const C* g0 = gr.p + i0 * gr.ld;
          // dv[0, kend) += Pᵀ·dO
          gemm(true, false, kend, n.e, rows, C(1), p.data(), kend, g0, gr.ld, C(1), dvw, n.e);
          // dP = dO·Vᵀ; dS = P ∘ (dP − D), D_i = dO_i · O_i
          gemm(false, true, rows, kend, n.e, C(1), g0, gr.ld, vr.p, vr.ld, C(0), ds.data(), kend);
          for (std::int64_t r = 0; r < rows; ++r) {
            const C* gi = g0 + r * gr.ld;
            const C* oi = orow.p + (i0 + r) * orow.ld;
            C dsum = 0;
            for (std::int64_t c = 0; c < n.e; ++c)
              dsum += gi[c] * oi[c];
            C* dsr = ds.data() + r * kend;
            const C* pr = p.data() + r * kend;
            for (std::int64_t j = 0; j < kend; ++j)
              dsr[j] = pr[j] * (dsr[j] - dsum);
          }
          // dq = scale · dS·K;  dk[0, kend) += scale · dSᵀ·Q
          gemm(false, false, rows, n.d, kend, scale, ds.data(), kend, kr.p, kr.ld, C(0),
               dqh + i0 * n.d, n.d);
          gemm(true, false, kend, n.d, rows, scale, ds.data(), kend, qr.p + i0 * qr.ld, qr.ld, C(1),
               dkw, n.d);
        }
      }
    }
  });
}

std::tuple<Tensor, Tensor> attention_kernel(const Tensor& q_in, const Tensor& k_in,
                                            const Tensor& v_in, double scale, bool causal) {
  const ScalarType dt = q_in.dtype();
  const ScalarType ct = compute_dtype(dt);
  TB_CHECK_T(TypeError, core::is_floating_point(dt),
             "[scaled_dot_product_attention] expects floating-point tensors, got ", dt);
  const Dims n(q_in, k_in, v_in);
  const Tensor q = gemm_rows(q_in, ct);
  const Tensor k = gemm_rows(k_in, ct);
  const Tensor v = gemm_rows(v_in, ct);
  Tensor out = Tensor::empty({n.b, n.h, n.t, n.e}, ct, q.device());
  Tensor lse = Tensor::empty({n.b, n.h, n.t}, ct, q.device());
  if (ct == ScalarType::Float64) {
    attention_forward<double>(n, q, k, v, scale, causal, out, lse);
  } else {
    attention_forward<float>(n, q, k, v, static_cast<float>(scale), causal, out, lse);
  }
  return {out.dtype() == dt ? out : out.to(dt), lse};
}

std::tuple<Tensor, Tensor, Tensor> attention_backward_kernel(const Tensor& g_in, const Tensor& q_in,
                                                             const Tensor& k_in, const Tensor& v_in,
                                                             const Tensor& out_in,
                                                             const Tensor& lse_in, double scale,
                                                             bool causal) {
  const ScalarType dt = q_in.dtype();
  const ScalarType ct = compute_dtype(dt);
  const Dims n(q_in, k_in, v_in);
  const Tensor g = gemm_rows(g_in, ct);
  const Tensor q = gemm_rows(q_in, ct);
  const Tensor k = gemm_rows(k_in, ct);
  const Tensor v = gemm_rows(v_in, ct);
  const Tensor out = gemm_rows(out_in, ct);
  const Tensor lse = lse_in.to(ct).contiguous();
  Tensor dq = Tensor::empty({n.b, n.h, n.t, n.d}, ct, q.device());
  Tensor dk = Tensor::empty({n.b, n.hkv, n.s, n.d}, ct, q.device());
  Tensor dv = Tensor::empty({n.b, n.hkv, n.s, n.e}, ct, q.device());
  if (ct == ScalarType::Float64) {
    attention_backward<double>(n, g, q, k, v, out, lse, scale, causal, dq, dk, dv);
  } else {
    attention_backward<float>(n, g, q, k, v, out, lse, static_cast<float>(scale), causal, dq, dk,
                              dv);
  }
  if (ct == dt) return {dq, dk, dv};
  return {dq.to(dt), dk.to(dt), dv.to(dt)};
}

}  // namespace

void register_attention_kernels(dispatch::Dispatcher& d) {
  const auto cpu = dispatch::DispatchKey::CPU;
  d.impl<sig::Attention>("scaled_dot_product_attention", cpu, attention_kernel).detach();
  d.impl<sig::AttentionBackward>("scaled_dot_product_attention_backward", cpu,
                                 attention_backward_kernel)
      .detach();
}

}  // namespace tb::cpu::TB_CPU_CAPABILITY
