// CPU attention (attention.h): one request's query rows over its keys, addressed as
// tiles of the KV block size, with an online softmax whose every operation and order
// are fixed per query row (docs/backend.md, "attention"). The head-dim-specialized
// kernels (attention_fixed) run several rows × several keys at a time, the reference
// loop (attention_body) one row alone; both give the same bits, on every ISA clone.
#include "backend/cpu/attention.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/isa.h"
#include "backend/cpu/vec8.h"

namespace pagedkv::backend::cpu {
namespace {

bool g_attention_reference = false;

// The eight sums hsum(s[0]) … hsum(s[7]) as one vector: the same additions in the
// same tree (l0+l4, then (l0+l4)+(l2+l6), then the two halves), done for eight
// keys at once with shuffles instead of one horizontal reduction per key
// (hsum8x8 below).
// aK[i] = sK[i] + sK[i+4]: hsum8_lohi(x, y) = [ax | ay].
PKV_INLINE v8f hsum8_lohi(v8f x, v8f y) {
  return __builtin_shufflevector(x, y, 0, 1, 2, 3, 8, 9, 10, 11) +
         __builtin_shufflevector(x, y, 4, 5, 6, 7, 12, 13, 14, 15);
}
// bK = [aK[0] + aK[2], aK[1] + aK[3]]: hsum8_pairs([a0|a1], [a2|a3]) = [b0 b2 b1 b3].
PKV_INLINE v8f hsum8_pairs(v8f x, v8f y) {
  return __builtin_shufflevector(x, y, 0, 1, 8, 9, 4, 5, 12, 13) +
         __builtin_shufflevector(x, y, 2, 3, 10, 11, 6, 7, 14, 15);
}
// hsum8x8 in two halves: the pairs of four keys' sums (keys 0–3 from s[0..3],
// keys 4–7 from s[4..7]), then the eight sums from the two halves.
PKV_INLINE v8f hsum8x4_pairs(const v8f* s) {
  return hsum8_pairs(hsum8_lohi(s[0], s[1]), hsum8_lohi(s[2], s[3]));
}
PKV_INLINE v8f hsum8x8_join(v8f w0, v8f w1) {
  // sK = bK[0] + bK[1], in key order.
  return __builtin_shufflevector(w0, w1, 0, 4, 2, 6, 8, 12, 10, 14) +
         __builtin_shufflevector(w0, w1, 1, 5, 3, 7, 9, 13, 11, 15);
}
PKV_INLINE v8f hsum8x8(const v8f* s) {
  return hsum8x8_join(hsum8x4_pairs(s), hsum8x4_pairs(s + 4));
}

// p[j] = e^(p[j] - m) for j < n; p has room for n rounded up to 8.
PKV_INLINE void exp_shifted(float* p, int32_t n, float m) {
  const v8f mv = splat8(m);
  for (int32_t j = 0; j < n; j += 8) store8(p + j, vexp(load8(p + j) - mv));
}

// p[j] = e^(p[j] - m) for j < n (exp_shifted), and l + p[0] + … + p[n-1] added in
// index order, from the registers (p has room for n rounded up to 8).
PKV_INLINE float exp_sum(float* p, int32_t n, float m, float l) {
  const v8f mv = splat8(m);
  for (int32_t j = 0; j < n; j += 8) {
    const v8f e = vexp(load8(p + j) - mv);
    store8(p + j, e);
    for (int i = 0; i < 8 && j + i < n; ++i) l = l + e[i];
  }
  return l;
}

// exp_sum of two rows in one loop: each row's operations and their order are
// exp_sum's; the two dependent chains of additions interleave (one add's latency
// a key was the bound).
PKV_INLINE void exp_sum2(float* pa, int32_t na, float ma, float& la, float* pb, int32_t nb,
                         float mb, float& lb) {
  const v8f mav = splat8(ma), mbv = splat8(mb);
  float sa = la, sb = lb;
  const int32_t n = std::max(na, nb);
  for (int32_t j = 0; j < n; j += 8) {
    v8f ea = {0, 0, 0, 0, 0, 0, 0, 0}, eb = ea;
    if (j < na) {
      ea = vexp(load8(pa + j) - mav);
      store8(pa + j, ea);
    }
    if (j < nb) {
      eb = vexp(load8(pb + j) - mbv);
      store8(pb + j, eb);
    }
    for (int i = 0; i < 8; ++i) {
      if (j + i < na) sa = sa + ea[i];
      if (j + i < nb) sb = sb + eb[i];
    }
  }
  la = sa;
  lb = sb;
}

// exp_sum of four rows in one loop, as exp_sum2: each row's operations and their
// order are exp_sum's, and the four dependent chains of additions interleave (with
// two, the chains' add latency still cost as much as a row's scores or values).
PKV_INLINE void exp_sum4(float* const* p, const int32_t* n, const float* m, float* l) {
  float* pr[4];
  int32_t nr[4];
  v8f mv[4];
  float sr[4];
  int32_t nmax = 0;
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r) {
    pr[r] = p[r];
    nr[r] = n[r];
    mv[r] = splat8(m[r]);
    sr[r] = l[r];
    nmax = std::max(nmax, nr[r]);
  }
  for (int32_t j = 0; j < nmax; j += 8) {
    v8f e[4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      e[r] = v8f{0, 0, 0, 0, 0, 0, 0, 0};
      if (j < nr[r]) {
        e[r] = vexp(load8(pr[r] + j) - mv[r]);
        store8(pr[r] + j, e[r]);
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r)
        if (j + i < nr[r]) sr[r] = sr[r] + e[r][i];
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r) l[r] = sr[r];
}

// KD, a kernel's K/V element type: 0 f32, 1 bf16, 2 f16 — plus kWidenAsm in the
// AVX2 / AVX-512 clones, where bf16 and f16 are widened by single instructions
// (vpmovzxwd + a shift; vcvtph2ps, exact for every f16) written as inline asm.
// GCC 12 lowers the generic widening (__builtin_convertvector of 8 u16 to 8 u32)
// to two 128-bit halves, a byte shift and an insert — four shuffle-port µops
// where one does, which made the bf16 K/V kernels shuffle-bound (2.0–2.3x the
// f32 kernels' time on K/V in L2; docs/performance.md). The same values either
// way, so the same bits. kWidenZmm (the AVX-512 clone only) also widens 16 bf16
// values by one zmm vpmovzxwd. The AVX2 clone runs only where F16C is present too
// (isa.cc).
constexpr int kWidenAsm = 4, kWidenZmm = 8;
constexpr int kv_type(int KD) { return KD & 3; }  // 0 f32, 1 bf16, 2 f16
constexpr int64_t kv_esize(int KD) { return kv_type(KD) == 0 ? 4 : 2; }

typedef uint16_t v8u16_alias __attribute__((vector_size(16), may_alias));
typedef uint16_t v16u16_alias __attribute__((vector_size(32), may_alias));
typedef uint32_t v16u32 __attribute__((vector_size(64)));

// bf16 → f32 of 8 values at p: vpmovzxwd from memory, then the 16-bit shift.
PKV_INLINE v8f widen_bf16_asm(const uint16_t* p) {
  v8u32 u;
  asm("vpmovzxwd %1, %0" : "=v"(u) : "m"(*reinterpret_cast<const v8u16_alias*>(p)));
  u = u << 16;
  v8f f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}
// f16 → f32 of 8 values at p (F16C's vcvtph2ps: exact, subnormals included).
PKV_INLINE v8f widen_f16_asm(const uint16_t* p) {
  v8f f;
  asm("vcvtph2ps %1, %0" : "=v"(f) : "m"(*reinterpret_cast<const v8u16_alias*>(p)));
  return f;
}

// 8 K/V elements at element offset `off` of a tile of dtype KD.
template <int KD>
PKV_INLINE v8f load_kv(const void* base, int64_t off) {
  if constexpr (kv_type(KD) == 0) {
    return load8(static_cast<const float*>(base) + off);
  } else {
    const uint16_t* h = static_cast<const uint16_t*>(base) + off;
    if constexpr (KD & kWidenAsm)
      return kv_type(KD) == 1 ? widen_bf16_asm(h) : widen_f16_asm(h);
    else
      return kv_type(KD) == 1 ? widen_bf16(h) : widen_f16_vec(h);
  }
}
template <int KD>
PKV_INLINE float kv_scalar(const void* base, int64_t off) {
  if constexpr (kv_type(KD) == 0) {
    return static_cast<const float*>(base)[off];
  } else if constexpr (kv_type(KD) == 1) {
    return bf16_to_f32(static_cast<const uint16_t*>(base)[off]);
  } else {
    return f16_to_f32(static_cast<const uint16_t*>(base)[off]);
  }
}
template <int KD>
PKV_INLINE v8f load_kv_partial(const void* base, int64_t off, int64_t n) {
  float t[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t i = 0; i < n; ++i) t[i] = kv_scalar<KD>(base, off + i);
  return load8(t);
}

// 16 K/V elements as one 16-float vector (the AVX-512 build of attention's
// element-wise value updates; per lane the same operations as two 8-float halves).
typedef float v16f __attribute__((vector_size(64)));
template <int KD>
PKV_INLINE v16f load_kv16(const void* base, int64_t off) {
  if constexpr (kv_type(KD) == 0) {
    v16f v;
    std::memcpy(&v, static_cast<const float*>(base) + off, sizeof(v));
    return v;
  } else if constexpr (kv_type(KD) == 1 && (KD & kWidenZmm)) {
    v16u32 u;
    asm("vpmovzxwd %1, %0"
        : "=v"(u)
        : "m"(*reinterpret_cast<const v16u16_alias*>(static_cast<const uint16_t*>(base) + off)));
    u = u << 16;
    v16f f;
    std::memcpy(&f, &u, sizeof(f));
    return f;
  } else {
    const v8f lo = load_kv<KD>(base, off), hi = load_kv<KD>(base, off + 8);
    return __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  }
}

// Σ q[i]·k[i] over a K row of dtype KD, in dot_f32's lane order.
template <int KD>
PKV_INLINE float dot_kv(const float* a, const void* kb, int64_t off, int64_t n) {
  v8f acc = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t n8 = n & ~int64_t{7};
  for (int64_t i = 0; i < n8; i += 8) acc += load8(a + i) * load_kv<KD>(kb, off + i);
  if (n8 < n) acc += load_partial(a + n8, n - n8) * load_kv_partial<KD>(kb, off + n8, n - n8);
  return hsum(acc);
}

// One query/head task of attention (see attention.h / AttentionArgs). KD is the
// K/V element type (0 f32, 1 bf16, 2 f16), widened exactly on load, so a bf16 KV
// cache gives the bits an f32 cache holding the same (rounded) values gives.
template <int KD>
PKV_INLINE void attention_body(const AttentionArgs& a, int64_t b, int64_t e, float* acc,
                               float* scores) {
  const int32_t hd = a.head_dim;
  const int32_t group = a.num_heads / a.num_kv_heads;
  const int64_t kv_row = static_cast<int64_t>(a.num_kv_heads) * hd;
  const bool vec = hd % 8 == 0;
  for (int64_t task = b; task < e; ++task) {
    int64_t t = task / a.num_heads;
    int32_t h = static_cast<int32_t>(task % a.num_heads);
    int32_t kvh = h / group;
    const float* q = a.q + (t * a.num_heads + h) * hd;
    int32_t pos = a.positions[t];
    int32_t start = 0;
    if (a.sliding_window > 0 && pos - a.sliding_window + 1 > 0) start = pos - a.sliding_window + 1;
    float mval = -std::numeric_limits<float>::infinity();
    float l = 0.0f;
    for (int32_t d = 0; d < hd; ++d) acc[d] = 0.0f;
    for (int32_t tile = start / a.tile; tile <= pos / a.tile; ++tile) {
      int32_t j0 = std::max(start, tile * a.tile);
      int32_t j1 = std::min(pos + 1, (tile + 1) * a.tile);
      const void* kt = a.k_tiles[tile];
      const void* vt = a.v_tiles[tile];
      float tmax = -std::numeric_limits<float>::infinity();
      for (int32_t j = j0; j < j1; ++j) {
        float sc = dot_kv<KD>(q, kt, (j - tile * a.tile) * kv_row + kvh * hd, hd) * a.scale;
        scores[j - j0] = sc;
        tmax = std::max(tmax, sc);
      }
      float mnew = std::max(mval, tmax);
      float alpha = vexp1(mval - mnew);
      l = l * alpha;
      exp_shifted(scores, j1 - j0, mnew);
      // Element-wise updates: vector width cannot change their results.
      if (vec) {
        v8f av = {alpha, alpha, alpha, alpha, alpha, alpha, alpha, alpha};
        for (int32_t d = 0; d < hd; d += 8) store8(acc + d, load8(acc + d) * av);
      } else {
        for (int32_t d = 0; d < hd; ++d) acc[d] = acc[d] * alpha;
      }
      for (int32_t j = j0; j < j1; ++j) {
        float pj = scores[j - j0];
        l = l + pj;
        const int64_t vo = (j - tile * a.tile) * kv_row + kvh * hd;
        if (vec) {
          v8f pv = {pj, pj, pj, pj, pj, pj, pj, pj};
          for (int32_t d = 0; d < hd; d += 8)
            store8(acc + d, load8(acc + d) + pv * load_kv<KD>(vt, vo + d));
        } else {
          for (int32_t d = 0; d < hd; ++d) acc[d] = acc[d] + pj * kv_scalar<KD>(vt, vo + d);
        }
      }
      mval = mnew;
    }
    float* o = a.out + (t * a.num_heads + h) * hd;
    for (int32_t d = 0; d < hd; ++d) o[d] = acc[d] / l;
  }
}

// How attention work is cut into tasks: a task is up to `qb` consecutive query
// tokens of one AttentionArgs × `hb` consecutive query heads (a divisor of the GQA
// group, so they share one KV head). Task ids run token block by token block.
struct AttnPlan {
  int32_t qb = 1, hb = 1;
  int64_t tasks(const AttentionArgs& a) const {
    return static_cast<int64_t>((a.num_tokens + qb - 1) / qb) * (a.num_heads / hb);
  }
};
// A task's query rows (qb × hb) share each K/V tile's copy (attention_fixed), so
// the more rows, the fewer copies — each K/V row of one head lies a whole token
// row from the next and misses the cache. kAttnRows for decode and short prompts
// (under kAttnLongTokens tokens); a longer prompt takes the most rows, up to
// kAttnMaxRows, that still leave kAttnTasksPerThread tasks a thread (tasks are
// handed out first come, first served, and a prompt's tasks differ in cost). On
// the 2-vCPU AVX2 host 128 rows ran a 256 × 2,048 prompt case 1.15× and 128 × 384
// 1.1× faster than 32 and 16, the small preset's 96 × 320 the same, and a
// 4,096-token prompt's attention 1.1–1.2× (docs/performance.md). Which task holds
// a row changes none of its bits, so neither does the thread count through this.
constexpr int kAttnRows = 16;
constexpr int kAttnMaxRows = 128;
constexpr int32_t kAttnLongTokens = 64;
constexpr int64_t kAttnTasksPerThread = 4;

// Scores of one query row against keys kb … ke-1 of a tile whose key j starts at
// element off + j·stride of kt (dtype KD): the row's dot_kv sums, times scale,
// into sc[0 … ke-kb); returns their maximum (taken in key order). Eight keys at a
// time: eight independent accumulator chains, each the exact dot_kv sequence of
// its key, summed by hsum8x8 (hsum's tree for each), so the bits are dot_kv's;
// then four, then one.
template <int HD, int KD>
PKV_INLINE float row_scores(const float* q, const void* kt, int64_t off, int64_t stride, int32_t kb,
                            int32_t ke, float scale, float* sc) {
  constexpr int C = HD / 8;
  float tmax = -std::numeric_limits<float>::infinity();
  int32_t j = kb;
  for (; j + 8 <= ke; j += 8) {
    const int64_t o0 = off + j * stride;
    v8f s8[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) s8[i] = v8f{0, 0, 0, 0, 0, 0, 0, 0};
#pragma GCC unroll 32
    for (int c = 0; c < C; ++c) {
      const v8f qv = load8(q + 8 * c);
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) s8[i] += qv * load_kv<KD>(kt, o0 + i * stride + 8 * c);
    }
    const v8f s = hsum8x8(s8) * splat8(scale);
    store8(sc + (j - kb), s);
    for (int i = 0; i < 8; ++i) tmax = std::max(tmax, s[i]);
  }
  for (; j + 4 <= ke; j += 4) {
    const int64_t o0 = off + j * stride;
    v8f s0 = {0, 0, 0, 0, 0, 0, 0, 0}, s1 = s0, s2 = s0, s3 = s0;
#pragma GCC unroll 32
    for (int c = 0; c < C; ++c) {
      const v8f qv = load8(q + 8 * c);
      s0 += qv * load_kv<KD>(kt, o0 + 8 * c);
      s1 += qv * load_kv<KD>(kt, o0 + stride + 8 * c);
      s2 += qv * load_kv<KD>(kt, o0 + 2 * stride + 8 * c);
      s3 += qv * load_kv<KD>(kt, o0 + 3 * stride + 8 * c);
    }
    const float s[4] = {hsum(s0) * scale, hsum(s1) * scale, hsum(s2) * scale, hsum(s3) * scale};
    for (int i = 0; i < 4; ++i) {
      sc[j - kb + i] = s[i];
      tmax = std::max(tmax, s[i]);
    }
  }
  for (; j < ke; ++j) {
    const float s = dot_kv<KD>(q, kt, off + j * stride, HD) * scale;
    sc[j - kb] = s;
    tmax = std::max(tmax, s);
  }
  return tmax;
}

// accp[d] = accp[d]·alpha + Σ_j p[j-kb]·v_j[d] over keys kb … ke-1 in order (key j
// of the tile at element off + j·stride of vt, dtype KD): attention_body's value
// update, element-wise (W = 16: 16 floats per operation, the same per element).
template <int HD, int KD, int W>
PKV_INLINE void row_values(float* accp, float alpha, const float* p, const void* vt, int64_t off,
                           int64_t stride, int32_t kb, int32_t ke) {
  if constexpr (W == 16 && HD % 16 == 0) {
    constexpr int C16 = HD / 16;
    v16f acc[C16];
    v16f av, pv;
    for (int i = 0; i < 16; ++i) av[i] = alpha;
#pragma GCC unroll 16
    for (int c = 0; c < C16; ++c) {
      std::memcpy(&acc[c], accp + 16 * c, sizeof(v16f));
      acc[c] = acc[c] * av;
    }
    for (int32_t j = kb; j < ke; ++j) {
      const float pj = p[j - kb];
      const int64_t vo = off + j * stride;
      for (int i = 0; i < 16; ++i) pv[i] = pj;
#pragma GCC unroll 16
      for (int c = 0; c < C16; ++c) acc[c] = acc[c] + pv * load_kv16<KD>(vt, vo + 16 * c);
    }
#pragma GCC unroll 16
    for (int c = 0; c < C16; ++c) std::memcpy(accp + 16 * c, &acc[c], sizeof(v16f));
  } else {
    constexpr int C = HD / 8;
    v8f acc[C];
    const v8f av = splat8(alpha);
#pragma GCC unroll 32
    for (int c = 0; c < C; ++c) acc[c] = load8(accp + 8 * c) * av;
    for (int32_t j = kb; j < ke; ++j) {
      const float pj = p[j - kb];
      const int64_t vo = off + j * stride;
      const v8f pv = splat8(pj);
#pragma GCC unroll 32
      for (int c = 0; c < C; ++c) acc[c] = acc[c] + pv * load_kv<KD>(vt, vo + 8 * c);
    }
#pragma GCC unroll 32
    for (int c = 0; c < C; ++c) store8(accp + 8 * c, acc[c]);
  }
}

// Two query rows' dot products with the N keys at o0, o0 + stride, …: per key and
// row one 8-float accumulator from zero, the head's 8-float groups added in order
// (row_scores's blocks), each K load serving both rows.
template <int N, int HD, int KD>
PKV_INLINE void dot_keys2(const float* q0, const float* q1, const void* kt, int64_t o0,
                          int64_t stride, v8f (&a)[N], v8f (&b)[N]) {
#pragma GCC unroll 8
  for (int i = 0; i < N; ++i) a[i] = b[i] = v8f{0, 0, 0, 0, 0, 0, 0, 0};
#pragma GCC unroll 32
  for (int c = 0; c < HD / 8; ++c) {
    const v8f qa = load8(q0 + 8 * c), qb = load8(q1 + 8 * c);
#pragma GCC unroll 8
    for (int i = 0; i < N; ++i) {
      const v8f kv = load_kv<KD>(kt, o0 + i * stride + 8 * c);
      a[i] += qa * kv;
      b[i] += qb * kv;
    }
  }
}

// row_scores of two query rows over the same keys kb … ke-1 of one tile (a decode
// row's GQA pair of heads, reading its tile in place): each K load serves both
// rows, and their independent chains (the dot products' and the running maxima's)
// interleave. Each row's operations and their order are row_scores's (8 keys at
// a time through hsum8x8, then 4 through hsum, then dot_kv), so the bits are.
// Used on the 16-float build only (two rows × eight keys of 8-float accumulators
// need its 32 vector registers; on 8-float AVX2, four keys at a time read in place
// measured slower with eight decode rows than one row at a time).
template <int HD, int KD>
PKV_INLINE void row_scores2(const float* q0, const float* q1, const void* kt, int64_t off,
                            int64_t stride, int32_t kb, int32_t ke, float scale, float* sc0,
                            float* sc1, float& tmax0, float& tmax1) {
  float m0 = -std::numeric_limits<float>::infinity(), m1 = m0;
  const v8f sv = splat8(scale);
  int32_t j = kb;
  for (; j + 8 <= ke; j += 8) {
    v8f a8[8], b8[8];
    dot_keys2<8, HD, KD>(q0, q1, kt, off + j * stride, stride, a8, b8);
    const v8f sa = hsum8x8(a8) * sv, sb = hsum8x8(b8) * sv;
    store8(sc0 + (j - kb), sa);
    store8(sc1 + (j - kb), sb);
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
      m0 = std::max(m0, sa[i]);
      m1 = std::max(m1, sb[i]);
    }
  }
  for (; j + 4 <= ke; j += 4) {
    v8f a4[4], b4[4];
    dot_keys2<4, HD, KD>(q0, q1, kt, off + j * stride, stride, a4, b4);
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      const float sa = hsum(a4[i]) * scale, sb = hsum(b4[i]) * scale;
      sc0[j - kb + i] = sa;
      sc1[j - kb + i] = sb;
      m0 = std::max(m0, sa);
      m1 = std::max(m1, sb);
    }
  }
  for (; j < ke; ++j) {
    const float sa = dot_kv<KD>(q0, kt, off + j * stride, HD) * scale;
    const float sb = dot_kv<KD>(q1, kt, off + j * stride, HD) * scale;
    sc0[j - kb] = sa;
    sc1[j - kb] = sb;
    m0 = std::max(m0, sa);
    m1 = std::max(m1, sb);
  }
  tmax0 = m0;
  tmax1 = m1;
}

// row_values (W = 16) of two rows over the same keys kb … ke-1 of one tile read in
// place: each V load serves both rows, whose accumulator chains interleave (one
// row alone waits an add's latency a key). Each element sees row_values's
// operations in its order: acc·alpha, then acc + p_j·v_j per key, j ascending.
template <int HD, int KD>
PKV_INLINE void row_values2(float* acc0, float alpha0, const float* p0, float* acc1, float alpha1,
                            const float* p1, const void* vt, int64_t off, int64_t stride,
                            int32_t kb, int32_t ke) {
  constexpr int C16 = HD / 16;
  v16f a[C16], b[C16], av0, av1;
  for (int i = 0; i < 16; ++i) {
    av0[i] = alpha0;
    av1[i] = alpha1;
  }
#pragma GCC unroll 16
  for (int c = 0; c < C16; ++c) {
    std::memcpy(&a[c], acc0 + 16 * c, sizeof(v16f));
    std::memcpy(&b[c], acc1 + 16 * c, sizeof(v16f));
    a[c] = a[c] * av0;
    b[c] = b[c] * av1;
  }
  for (int32_t j = kb; j < ke; ++j) {
    v16f pa, pb;
    for (int i = 0; i < 16; ++i) {
      pa[i] = p0[j - kb];
      pb[i] = p1[j - kb];
    }
    const int64_t vo = off + j * stride;
#pragma GCC unroll 16
    for (int c = 0; c < C16; ++c) {
      const v16f v = load_kv16<KD>(vt, vo + 16 * c);
      a[c] = a[c] + pa * v;
      b[c] = b[c] + pb * v;
    }
  }
#pragma GCC unroll 16
  for (int c = 0; c < C16; ++c) {
    std::memcpy(acc0 + 16 * c, &a[c], sizeof(v16f));
    std::memcpy(acc1 + 16 * c, &b[c], sizeof(v16f));
  }
}

// tm[r] = the maximum of tm[r] and row r's scores sv[r] of the 8-key block blk
// whose keys lie in [klo[r], khi[r]), in key order. Lanes of keys outside the
// range become −inf, which std::max(tm, −inf) leaves as tm (NaN included): the
// same fold as skipping them, without a branch a key (with the branches, GCC kept
// an AVX2 row's tm on the stack: a store and a reload a key, ~14% of a prompt's
// attention on the 2-vCPU AVX2 host).
template <int R>
PKV_INLINE void fold_block_max(const v8f (&sv)[R], int32_t blk, const int32_t (&klo)[R],
                               const int32_t (&khi)[R], float (&tm)[R]) {
  const v8i32 key = v8i32{0, 1, 2, 3, 4, 5, 6, 7} + 8 * blk;
  const v8f neg_inf = splat8(-std::numeric_limits<float>::infinity());
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r) {
    const v8f in_range = (key >= klo[r]) & (key < khi[r]) ? sv[r] : neg_inf;
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) tm[r] = std::max(tm[r], in_range[i]);
  }
}

// acc[r][i] = row r's dot_kv lanes with key key0 + i of a packed K block (kp's
// layout below, eight keys), NK keys from key0: per lane the sum over c of
// q[8c+i]·k[8c+i], multiply then add, c ascending, from 0.
template <int HD, int R, int NK>
PKV_INLINE void packed_key_dots(const float* const* q, const float* kblk, int key0,
                                v8f (&acc)[R][NK]) {
  constexpr int C = HD / 8;
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < NK; ++i) acc[r][i] = v8f{0, 0, 0, 0, 0, 0, 0, 0};
  auto chunk = [&](int c) __attribute__((always_inline)) {
    v8f qv[R];
    for (int r = 0; r < R; ++r) qv[r] = load8(q[r] + 8 * c);
#pragma GCC unroll 8
    for (int i = 0; i < NK; ++i) {
      const int key = key0 + i;
      const v8f kv = load8(kblk + ((key / 2) * C + c) * 16 + (key % 2) * 8);
      for (int r = 0; r < R; ++r) acc[r][i] += qv[r] * kv;
    }
  };
  // Past four chunks, two an iteration rather than the whole head: fully unrolled,
  // GCC (12, -O3) issued every K and q load of the block before the first multiply
  // and spilled them (246 stack references for head_dim 128); as a loop the
  // accumulators stay in registers (1.2× a prompt's attention on the 2-vCPU AVX2
  // host). Head_dim 32's four chunks measured faster unrolled.
  if constexpr (C <= 4) {
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) chunk(c);
  } else {
#pragma GCC unroll 2
    for (int c = 0; c < C; ++c) chunk(c);
  }
}

// The packed K layout (attention_fixed's kp): key j's chunk c (elements 8c … 8c+7)
// at kp[((j/2)·HD/8 + c)·16 + (j%2)·8], so keys 2i and 2i+1 of a chunk are one
// 16-float vector. Scores of rows q[0 … R-1] (R = 1 or 2) for the 8-key blocks
// [blo, bhi) of the tile, written to sc[r][j] (j = the key in the tile); tmax[r]
// becomes the maximum of it and row r's scores of keys kb[r] … ke[r]-1, in key order. Each key's
// lanes are dot_kv's eight chains (lane i: Σ over c of q[8c+i]·k[8c+i], multiply
// then add, c ascending, from 0), reduced by hsum8x8 (hsum's tree) and scaled: the
// bits of dot_kv · scale. W = 16 runs two keys per 16-float operation (the same
// per-lane operations); two rows share each K load (W = 8: four keys at a time).
template <int HD, int W, int R>
PKV_INLINE void packed_scores(const float* const* q, const float* kp, int32_t blo, int32_t bhi,
                              float scale, float* const* sc, const int32_t* kb, const int32_t* ke,
                              float* tmax) {
  constexpr int C = HD / 8;
  // The running maxima and key ranges in locals (registers): through the pointers,
  // which the score stores might alias for all the compiler knows, every key's
  // max went through memory (~17% of attention's time on the 2-vCPU Xeon).
  float tm[R];
  int32_t klo[R], khi[R];
  for (int r = 0; r < R; ++r) {
    tm[r] = tmax[r];
    klo[r] = kb[r];
    khi[r] = ke[r];
  }
  for (int32_t blk = blo; blk < bhi; ++blk) {
    const float* kblk = kp + static_cast<int64_t>(blk) * 4 * C * 16;
    v8f sums[R];  // the block's eight dot products a row (hsum8x8's tree)
    if constexpr (W == 16) {
      v16f acc[R][4];
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r)
        for (int p = 0; p < 4; ++p)
          for (int i = 0; i < 16; ++i) acc[r][p][i] = 0.0f;
#pragma GCC unroll 32
      for (int c = 0; c < C; ++c) {
        v16f qq[R];
        for (int r = 0; r < R; ++r) {
          const v8f qv = load8(q[r] + 8 * c);
          qq[r] = __builtin_shufflevector(qv, qv, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7);
        }
#pragma GCC unroll 4
        for (int p = 0; p < 4; ++p) {
          v16f kv;
          std::memcpy(&kv, kblk + (p * C + c) * 16, sizeof(kv));
          for (int r = 0; r < R; ++r) acc[r][p] += qq[r] * kv;
        }
      }
      for (int r = 0; r < R; ++r) {
        v8f s8[8];
        for (int p = 0; p < 4; ++p) {
          s8[2 * p] = __builtin_shufflevector(acc[r][p], acc[r][p], 0, 1, 2, 3, 4, 5, 6, 7);
          s8[2 * p + 1] =
              __builtin_shufflevector(acc[r][p], acc[r][p], 8, 9, 10, 11, 12, 13, 14, 15);
        }
        sums[r] = hsum8x8(s8);
      }
    } else if constexpr (R == 2) {
      // Two rows on 8-float vectors: 16 accumulators for the block's eight keys
      // would spill (16 ymm registers), so four keys at a time, each half reduced
      // to its key pairs (hsum8x4_pairs) before the next; hsum8x8_join finishes
      // them below — hsum8x8's operations on the same values.
      v8f w[R][2];
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        v8f a4[R][4];
        packed_key_dots<HD, R, 4>(q, kblk, 4 * h, a4);
        for (int r = 0; r < R; ++r) w[r][h] = hsum8x4_pairs(a4[r]);
      }
      for (int r = 0; r < R; ++r) sums[r] = hsum8x8_join(w[r][0], w[r][1]);
    } else {
      v8f s8[R][8];
      packed_key_dots<HD, R, 8>(q, kblk, 0, s8);
      for (int r = 0; r < R; ++r) sums[r] = hsum8x8(s8[r]);
    }
    // The block's scores, then each row's maximum over its keys in key order.
    v8f sv[R];
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r) {
      sv[r] = sums[r] * splat8(scale);
      store8(sc[r] + 8 * blk, sv[r]);
    }
    fold_block_max<R>(sv, blk, klo, khi, tm);
  }
  for (int r = 0; r < R; ++r) tmax[r] = tm[r];
}

// Rows a and b's value updates over their key ranges [ka0, ka1) and [kb0, kb1) of
// the packed V (vp[j·HD + d]): keys in ascending order for each row; over the keys
// both rows use, each V vector is loaded once for the two (kept in a register:
// GCC otherwise folds the load into both multiplies, and two 256-bit loads a
// multiply pair bound the AVX2 loop on the 2-vCPU Zen 3 host). Each element sees
// acc = acc·alpha as it is loaded (the tile's rescale), then acc = acc + p_j·v_j[d]
// per key.
// W = 16: 16-float vectors, the whole head a pass (head_dim ≤ 128); W = 8: 8-float
// vectors, 32 elements a pass (two rows' 4 + 4 accumulators fit the 16 ymm
// registers beside the weights and V) — which elements share a pass changes no
// element's sequence.
template <int HD, int W, bool kVec>
PKV_INLINE void packed_values2(float* acca, float alpha_a, const float* pa, int32_t ka0,
                               int32_t ka1, float* accb, float alpha_b, const float* pb,
                               int32_t kb0, int32_t kb1, const float* vp) {
  using V = std::conditional_t<W == 16, v16f, v8f>;
  constexpr int CH = HD / W;            // vectors a row
  constexpr int CB = W == 16 ? CH : 4;  // vectors a pass
  static_assert(HD % W == 0 && CH % CB == 0);
  // Each row: its keys before the common range alone, the common range [lo, hi)
  // together, then its keys after it alone.
  int32_t lo = std::max(ka0, kb0), hi = std::min(ka1, kb1);
  int32_t pre_a = lo, pre_b = lo, post_a = hi, post_b = hi;
  if (lo >= hi) {
    pre_a = post_a = ka1;
    pre_b = post_b = kb1;
    lo = hi = 0;
  }
  V ava, avb;
  for (int i = 0; i < W; ++i) {
    ava[i] = alpha_a;
    avb[i] = alpha_b;
  }
  for (int c0 = 0; c0 < CH; c0 += CB) {
    V a[CB], b[CB];
#pragma GCC unroll 16
    for (int c = 0; c < CB; ++c) {
      std::memcpy(&a[c], acca + W * (c0 + c), sizeof(V));
      std::memcpy(&b[c], accb + W * (c0 + c), sizeof(V));
      a[c] = a[c] * ava;
      b[c] = b[c] * avb;
    }
    auto one = [&](V* acc, float pj, int32_t j) {
      V pv;
      for (int i = 0; i < W; ++i) pv[i] = pj;
#pragma GCC unroll 16
      for (int c = 0; c < CB; ++c) {
        V v;
        std::memcpy(&v, vp + static_cast<int64_t>(j) * HD + W * (c0 + c), sizeof(v));
        acc[c] = acc[c] + pv * v;
      }
    };
    for (int32_t j = ka0; j < pre_a; ++j) one(a, pa[j], j);
    for (int32_t j = kb0; j < pre_b; ++j) one(b, pb[j], j);
    for (int32_t j = lo; j < hi; ++j) {
      V pva, pvb;
      for (int i = 0; i < W; ++i) {
        pva[i] = pa[j];
        pvb[i] = pb[j];
      }
#pragma GCC unroll 16
      for (int c = 0; c < CB; ++c) {
        V v;
        std::memcpy(&v, vp + static_cast<int64_t>(j) * HD + W * (c0 + c), sizeof(v));
        if constexpr (kVec) asm("" : "+v"(v));
        a[c] = a[c] + pva * v;
        b[c] = b[c] + pvb * v;
      }
    }
    for (int32_t j = post_a; j < ka1; ++j) one(a, pa[j], j);
    for (int32_t j = post_b; j < kb1; ++j) one(b, pb[j], j);
#pragma GCC unroll 16
    for (int c = 0; c < CB; ++c) {
      std::memcpy(acca + W * (c0 + c), &a[c], sizeof(V));
      std::memcpy(accb + W * (c0 + c), &b[c], sizeof(V));
    }
  }
}

// Asks for the lines of keys [0, T) of one KV head (elements off + j·stride …
// + HD − 1 of the tile, dtype KD) of a K and a V tile. Decode rows read each
// context tile once, from L3 or DRAM, in paged blocks the hardware prefetcher does
// not follow from one to the next; asking for a tile two ahead keeps its lines in
// flight while this one computes. Changes no value.
template <int HD, int KD>
PKV_INLINE void prefetch_tile(const void* kt, const void* vt, int64_t off, int64_t stride,
                              int32_t T) {
  constexpr int64_t kEsize = kv_esize(KD);
  const char* kb = static_cast<const char*>(kt) + off * kEsize;
  const char* vb = static_cast<const char*>(vt) + off * kEsize;
  for (int32_t j = 0; j < T; ++j) {
#pragma GCC unroll 8
    for (int64_t c = 0; c < HD * kEsize; c += 64) {
      __builtin_prefetch(kb + j * stride * kEsize + c, 0, 3);
      __builtin_prefetch(vb + j * stride * kEsize + c, 0, 3);
    }
  }
}

// The same computation as attention_body for a head_dim known at compile time (a
// multiple of 8), for all query rows of a task at once. Per K/V tile, the rows that
// read the same tile (all of a task's rows, or in a cross task the rows whose
// requests share that block) form a group; when the group is large enough (4 rows
// for f32 K/V, 2 for bf16/f16), the keys its rows need, of this task's KV head, are
// first copied (widened exactly to f32) into contiguous buffers — K in key pairs
// (packed_scores), V row by row — then (phase 1) every row computes its scores
// (two rows per K load on the 16-float build), tile max, rescale factor,
// e^(s − m) and running sum l, then (phase 2) every row updates its accumulator
// (two rows per V load on the 16-float build, head_dim ≤ 128). The copy makes each
// K/V row one contiguous stretch read from L1 by every row of the group — in the
// pool the tile's rows of one KV head lie num_kv_heads·head_dim floats apart (4 KiB
// for qwen3-0.6B: all in the same few L1 sets) — and widens bf16/f16 once per task,
// not once per row. A smaller group reads the tile in place (row_scores,
// row_values; on the 16-float build, two rows over the same keys, i.e. a decode
// row's GQA pair, go together: row_scores2, row_values2). The rows' exponentials
// and sums l run four rows a loop (exp_sum4), then two (exp_sum2).
// Every row performs exactly attention_body's operations in the same
// order (a copied value is the value itself; which rows share a load changes no
// row's arithmetic), so neither the task shape, the grouping, the copy nor the
// head_dim specialization changes a bit. ws holds the rows' accumulators
// (the task's rows × HD floats), ps their tile scores indexed by the key in the tile
// (the task's rows × pstride floats, pstride = the tile rounded up to 8, plus 8),
// kp and vp pstride × HD floats each (zeroed once: keys of a block of 8 that no
// row of the group needs hold zeros or stale K values; their scores are discarded).
//
// nargs == 1: tasks of argv[0] as AttnPlan numbers them. nargs > 1 (decode rows,
// one token each, of identical shape): task k is head block k of ALL the nargs
// rows, so rows that share K/V blocks (a common prefix) read each shared tile
// once per task instead of once per row.
//
// kVec: compiled for AVX2 or AVX-512 (attention_avx2 / attention_avx512), whose
// vectors fit a register operand of an (empty) asm statement; false in the
// baseline build.
template <int HD, int KD, int W, bool kVec>
PKV_INLINE void attention_fixed(const AttentionArgs* argv, int nargs, const AttnPlan& plan,
                                int64_t b, int64_t e, float* ws, float* ps, float* kp, float* vp) {
  const AttentionArgs& a = argv[0];
  static_assert(HD % 8 == 0);
  const int32_t group = a.num_heads / a.num_kv_heads;
  const int64_t kv_row = static_cast<int64_t>(a.num_kv_heads) * HD;
  const int32_t head_blocks = a.num_heads / plan.hb;
  constexpr int C = HD / 8;
  // Two rows' value updates share each V load (packed_values2's shapes).
  constexpr bool kValues2 = W == 16 ? HD % 16 == 0 && HD <= 128 : HD % 32 == 0;
  const int32_t T = a.tile, pstride = (a.tile + 7) / 8 * 8 + 8;
  for (int64_t task = b; task < e; ++task) {
    const bool cross = nargs > 1;
    const int32_t t0 = cross ? 0 : static_cast<int32_t>(task / head_blocks) * plan.qb;
    const int32_t t1 = cross ? 1 : std::min(a.num_tokens, t0 + plan.qb);
    const int32_t h0 = static_cast<int32_t>(task % head_blocks) * plan.hb;
    const int32_t kvh = h0 / group;
    const int64_t koff = static_cast<int64_t>(kvh) * HD;
    const int rows = (cross ? nargs : t1 - t0) * plan.hb;
    const float* qr[kAttnMaxRows];
    const AttentionArgs* ar[kAttnMaxRows];
    float* outr[kAttnMaxRows];
    int32_t start[kAttnMaxRows], pos[kAttnMaxRows];
    float mval[kAttnMaxRows], l[kAttnMaxRows], alpha[kAttnMaxRows];
    int32_t tile_lo = std::numeric_limits<int32_t>::max(), tile_hi = -1;
    for (int r = 0; r < rows; ++r) {
      const int32_t t = cross ? 0 : t0 + r / plan.hb, h = h0 + r % plan.hb;
      ar[r] = cross ? &argv[r / plan.hb] : &a;
      qr[r] = ar[r]->q + (static_cast<int64_t>(t) * a.num_heads + h) * HD;
      outr[r] = ar[r]->out + (static_cast<int64_t>(t) * a.num_heads + h) * HD;
      pos[r] = ar[r]->positions[t];
      start[r] = 0;
      if (a.sliding_window > 0 && pos[r] - a.sliding_window + 1 > 0)
        start[r] = pos[r] - a.sliding_window + 1;
      mval[r] = -std::numeric_limits<float>::infinity();
      l[r] = 0.0f;
      for (int d = 0; d < HD; ++d) ws[r * HD + d] = 0.0f;
      tile_lo = std::min(tile_lo, start[r] / T);
      tile_hi = std::max(tile_hi, pos[r] / T);
    }
    auto active = [&](int r, int32_t tile) { return tile >= start[r] / T && tile <= pos[r] / T; };
    // Decode rows: each row's tile kAhead tiles on is asked for before this one
    // computes (rows sharing a prefix name the same tile: asked once).
    constexpr int32_t kAhead = 2;
    const bool decode = cross || a.num_tokens == 1;
    auto prefetch_tiles = [&](int32_t tile) {
      const void* last = nullptr;
      for (int r = 0; r < rows; ++r) {
        if (!active(r, tile) || ar[r]->k_tiles[tile] == last) continue;
        last = ar[r]->k_tiles[tile];
        prefetch_tile<HD, KD>(last, ar[r]->v_tiles[tile], koff, kv_row, T);
      }
    };
    if (decode) {
      for (int32_t t = tile_lo; t <= std::min(tile_hi, tile_lo + kAhead - 1); ++t)
        prefetch_tiles(t);
    }
    for (int32_t tile = tile_lo; tile <= tile_hi; ++tile) {
      const int32_t base = tile * T;
      if (decode && tile + kAhead <= tile_hi) prefetch_tiles(tile + kAhead);
      for (int g0 = 0; g0 < rows;) {
        if (!active(g0, tile)) {
          ++g0;
          continue;
        }
        // The group: g0 and the following rows reading the same tile (inactive rows
        // in between are skipped); [k0, k1) the keys any of them needs.
        const void* kt = ar[g0]->k_tiles[tile];
        const void* vt = ar[g0]->v_tiles[tile];
        int g1 = g0, members = 0;
        int32_t k0 = T, k1 = 0;
        for (; g1 < rows; ++g1) {
          if (!active(g1, tile)) continue;
          if (ar[g1]->k_tiles[tile] != kt || ar[g1]->v_tiles[tile] != vt) break;
          ++members;
          k0 = std::min(k0, std::max(start[g1], base) - base);
          k1 = std::max(k1, std::min(pos[g1] + 1, base + T) - base);
        }
        // Copy when enough rows share the tile to repay it: f32 K/V from 4 rows on
        // (a decode row's GQA pair of heads reads its f32 tile in place, measured
        // cheaper), bf16/f16 from 2 (the copy also widens once for all rows).
        const bool packed = members >= (kv_type(KD) == 0 ? 4 : 2);
        if (packed) {
          for (int32_t j = k0; j < k1; ++j) {
            const int64_t o = j * kv_row + koff;
            // K and V by vector stores, f32 too (a 512-byte V memcpy ran as `rep
            // movsq`, 8% of a prompt's attention on the 2-vCPU AVX2 host).
            float* kd = kp + static_cast<int64_t>(j / 2) * C * 16 + (j % 2) * 8;
#pragma GCC unroll 32
            for (int c = 0; c < C; ++c) store8(kd + c * 16, load_kv<KD>(kt, o + 8 * c));
#pragma GCC unroll 32
            for (int c = 0; c < C; ++c) store8(vp + j * HD + 8 * c, load_kv<KD>(vt, o + 8 * c));
          }
        }
        // The group's active rows; row r's keys [kb[r], ke[r]) of the tile, its
        // scores ps + r·pstride indexed by the key in the tile.
        int act[kAttnMaxRows], na = 0;
        int32_t kb[kAttnMaxRows], ke[kAttnMaxRows];
        float tmaxr[kAttnMaxRows];
        for (int r = g0; r < g1; ++r) {
          if (!active(r, tile)) continue;
          act[na++] = r;
          kb[r] = std::max(start[r], base) - base;
          ke[r] = std::min(pos[r] + 1, base + T) - base;
        }
        // Phase 1: scores (two rows at a time on the 16-float build), then per row
        // the tile max in key order, the rescale factor, e^(s − m) and l.
        for (int i = 0; i < na;) {
          const int r = act[i];
          float* p = ps + r * pstride;
          if (!packed && W == 16 && i + 1 < na && kb[act[i + 1]] == kb[r] &&
              ke[act[i + 1]] == ke[r]) {
            // Two rows over the same keys (a decode row's GQA pair): one K load each.
            const int r2 = act[i + 1];
            row_scores2<HD, KD>(qr[r], qr[r2], kt, koff, kv_row, kb[r], ke[r], a.scale, p + kb[r],
                                ps + r2 * pstride + kb[r], tmaxr[r], tmaxr[r2]);
            i += 2;
          } else if (!packed) {
            tmaxr[r] =
                row_scores<HD, KD>(qr[r], kt, koff, kv_row, kb[r], ke[r], a.scale, p + kb[r]);
            ++i;
          } else if (i + 1 < na) {
            const int r2 = act[i + 1];
            const float* q2[2] = {qr[r], qr[r2]};
            float* s2[2] = {p, ps + r2 * pstride};
            const int32_t kb2[2] = {kb[r], kb[r2]}, ke2[2] = {ke[r], ke[r2]};
            float t2[2] = {-std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity()};
            packed_scores<HD, W, 2>(q2, kp, std::min(kb[r], kb[r2]) / 8,
                                    (std::max(ke[r], ke[r2]) + 7) / 8, a.scale, s2, kb2, ke2, t2);
            tmaxr[r] = t2[0];
            tmaxr[r2] = t2[1];
            i += 2;
          } else {
            const float* q1[1] = {qr[r]};
            float* s1[1] = {p};
            tmaxr[r] = -std::numeric_limits<float>::infinity();
            packed_scores<HD, W, 1>(q1, kp, kb[r] / 8, (ke[r] + 7) / 8, a.scale, s1, &kb[r], &ke[r],
                                    &tmaxr[r]);
            ++i;
          }
        }
        // The rescale factors e^(m − m') of eight rows a vexp (its lanes are
        // independent: each is vexp1's bits).
        for (int i0 = 0; i0 < na; i0 += 8) {
          const int nu = std::min(8, na - i0);
          v8f d = splat8(0.0f);
          for (int u = 0; u < nu; ++u) {
            const int r = act[i0 + u];
            const float mnew = std::max(mval[r], tmaxr[r]);
            d[u] = mval[r] - mnew;
            mval[r] = mnew;
          }
          const v8f ev = vexp(d);
          for (int u = 0; u < nu; ++u) {
            const int r = act[i0 + u];
            alpha[r] = ev[u];
            l[r] = l[r] * alpha[r];
          }
        }
        for (int i = 0; i < na;) {  // l += e^(s − m) over the tile, four rows a loop
          const int r = act[i];
          float* p = ps + r * pstride;
          if (i + 3 < na) {
            float* p4[4];
            int32_t n4[4];
            float m4[4], l4[4];
            for (int u = 0; u < 4; ++u) {
              const int ru = act[i + u];
              p4[u] = ps + ru * pstride + kb[ru];
              n4[u] = ke[ru] - kb[ru];
              m4[u] = mval[ru];
              l4[u] = l[ru];
            }
            exp_sum4(p4, n4, m4, l4);
            for (int u = 0; u < 4; ++u) l[act[i + u]] = l4[u];
            i += 4;
            continue;
          }
          if (i + 1 < na) {
            const int r2 = act[i + 1];
            exp_sum2(p + kb[r], ke[r] - kb[r], mval[r], l[r], ps + r2 * pstride + kb[r2],
                     ke[r2] - kb[r2], mval[r2], l[r2]);
            i += 2;
          } else {
            l[r] = exp_sum(p + kb[r], ke[r] - kb[r], mval[r], l[r]);
            ++i;
          }
        }
        // Phase 2: the value updates (two rows at a time from the copy on the
        // 16-float build, head_dim ≤ 128: their accumulators fit in registers).
        for (int i = 0; i < na;) {
          const int r = act[i];
          float* p = ps + r * pstride;
          if (!packed && W == 16 && HD % 16 == 0 && HD <= 128 && i + 1 < na &&
              kb[act[i + 1]] == kb[r] && ke[act[i + 1]] == ke[r]) {
            const int r2 = act[i + 1];
            row_values2<HD, KD>(ws + r * HD, alpha[r], p + kb[r], ws + r2 * HD, alpha[r2],
                                ps + r2 * pstride + kb[r], vt, koff, kv_row, kb[r], ke[r]);
            i += 2;
          } else if (!packed) {
            row_values<HD, KD, W>(ws + r * HD, alpha[r], p + kb[r], vt, koff, kv_row, kb[r], ke[r]);
            ++i;
          } else if (kValues2 && i + 1 < na) {
            const int r2 = act[i + 1];
            if constexpr (kValues2)
              packed_values2<HD, W, kVec>(ws + r * HD, alpha[r], p, kb[r], ke[r], ws + r2 * HD,
                                          alpha[r2], ps + r2 * pstride, kb[r2], ke[r2], vp);
            i += 2;
          } else {
            row_values<HD, 0, W>(ws + r * HD, alpha[r], p + kb[r], vp, 0, HD, kb[r], ke[r]);
            ++i;
          }
        }
        g0 = g1;
      }
    }
    for (int r = 0; r < rows; ++r) {
      float* o = outr[r];
      for (int32_t d = 0; d < HD; ++d) o[d] = ws[r * HD + d] / l[r];
    }
  }
}
template <int KD, int W, bool kVec>
PKV_INLINE void attention_dispatch_kd(const AttentionArgs* argv, int nargs, const AttnPlan& plan,
                                      int64_t b, int64_t e, float* ws, float* scores, float* kp,
                                      float* vp) {
  const AttentionArgs& a = argv[0];
  switch (g_attention_reference ? 0 : a.head_dim) {
    case 16:
      return attention_fixed<16, KD, W, kVec>(argv, nargs, plan, b, e, ws, scores, kp, vp);
    case 32:
      return attention_fixed<32, KD, W, kVec>(argv, nargs, plan, b, e, ws, scores, kp, vp);
    case 64:
      return attention_fixed<64, KD, W, kVec>(argv, nargs, plan, b, e, ws, scores, kp, vp);
    case 128:
      return attention_fixed<128, KD, W, kVec>(argv, nargs, plan, b, e, ws, scores, kp, vp);
    case 256:
      return attention_fixed<256, KD, W, kVec>(argv, nargs, plan, b, e, ws, scores, kp, vp);
    default:
      break;
  }
  // Other head dims: each query row alone (attention_body's (token, head) tasks).
  const int32_t head_blocks = a.num_heads / plan.hb;
  for (int64_t task = b; task < e; ++task) {
    const int32_t h0 = static_cast<int32_t>(task % head_blocks) * plan.hb;
    if (nargs > 1) {
      for (int j = 0; j < nargs; ++j) attention_body<KD>(argv[j], h0, h0 + plan.hb, ws, scores);
      continue;
    }
    const int32_t t0 = static_cast<int32_t>(task / head_blocks) * plan.qb;
    const int32_t t1 = std::min(a.num_tokens, t0 + plan.qb);
    for (int32_t t = t0; t < t1; ++t) {
      const int64_t first = static_cast<int64_t>(t) * a.num_heads + h0;
      attention_body<KD>(a, first, first + plan.hb, ws, scores);
    }
  }
}

// One function per ISA clone and K/V dtype (each a whole attention_dispatch_kd inlined):
// with the three dtypes in one function, a change to the bf16 kernels moved the f32
// kernels' code and ran them 5–8% slower; apart, each dtype's code is laid out alone.
#define PKV_ATTN_PARAMS                                                                        \
  const AttentionArgs *argv, int nargs, const AttnPlan &plan, int64_t b, int64_t e, float *ws, \
      float *scores, float *kp, float *vp
#define PKV_ATTN_ARGS argv, nargs, plan, b, e, ws, scores, kp, vp
using AttentionFn = void (*)(PKV_ATTN_PARAMS);

template <int KD>
__attribute__((target("avx2"), noinline)) void attention_avx2_kd(PKV_ATTN_PARAMS) {
  attention_dispatch_kd<KD, 8, true>(PKV_ATTN_ARGS);
}
// The same code with 32 vector registers (AVX-512VL) and the value updates 16
// floats at a time: the per-lane arithmetic is unchanged (no FMA:
// -ffp-contract=off), only fewer accumulators spill and fewer instructions issue.
template <int KD>
__attribute__((target("avx512f,avx512vl,avx2"), noinline)) void attention_avx512_kd(
    PKV_ATTN_PARAMS) {
  attention_dispatch_kd<KD, 16, true>(PKV_ATTN_ARGS);
}
template <int KD>
__attribute__((noinline)) void attention_generic_kd(PKV_ATTN_PARAMS) {
  attention_dispatch_kd<KD, 8, false>(PKV_ATTN_ARGS);
}

AttentionFn by_kv_dtype(WeightDType d, AttentionFn f32, AttentionFn bf16, AttentionFn f16) {
  return d == WeightDType::kF32 ? f32 : d == WeightDType::kBF16 ? bf16 : f16;
}
void attention_avx2(PKV_ATTN_PARAMS) {
  by_kv_dtype(argv[0].kv_dtype, attention_avx2_kd<0>, attention_avx2_kd<1 | kWidenAsm>,
              attention_avx2_kd<2 | kWidenAsm>)(PKV_ATTN_ARGS);
}
void attention_avx512(PKV_ATTN_PARAMS) {
  constexpr int kWiden = kWidenAsm | kWidenZmm;
  by_kv_dtype(argv[0].kv_dtype, attention_avx512_kd<0>, attention_avx512_kd<1 | kWiden>,
              attention_avx512_kd<2 | kWiden>)(PKV_ATTN_ARGS);
}
void attention_generic(PKV_ATTN_PARAMS) {
  by_kv_dtype(argv[0].kv_dtype, attention_generic_kd<0>, attention_generic_kd<1>,
              attention_generic_kd<2>)(PKV_ATTN_ARGS);
}
#undef PKV_ATTN_PARAMS
#undef PKV_ATTN_ARGS

}  // namespace

void set_attention_reference_for_testing(bool on) { g_attention_reference = on; }

void attention(const AttentionArgs& a, ThreadPool* pool) { attention_batch(&a, 1, pool); }

void attention_batch(const AttentionArgs* args, size_t count, ThreadPool* pool) {
  // Tasks (AttnPlan: a block of query tokens × a block of the query heads that share
  // a KV head) are numbered unit by unit; a unit is one arg, or (cross) a run of
  // decode args of one token each and identical shape whose task k is head block k
  // of all of them (rows sharing a prefix then share its K/V tiles). Each task is
  // computed whole by one thread and every query row's arithmetic is the same
  // whatever task holds it, so neither the batch, the grouping, the task shape nor
  // the thread count changes a result.
  const int threads = pool != nullptr ? pool->num_threads() : 1;
  auto plan_for = [threads](const AttentionArgs& a, bool grouped) {
    if (!grouped) return AttnPlan{};
    const int32_t group = a.num_kv_heads > 0 ? a.num_heads / a.num_kv_heads : 1;
    auto plan_of = [&](int32_t rows) {
      AttnPlan q;
      for (int32_t hb = std::min<int32_t>(group, rows); hb >= 1; --hb) {
        if (group % hb == 0) {
          q.hb = hb;
          break;
        }
      }
      q.qb = rows / q.hb;
      return q;
    };
    if (a.num_tokens >= kAttnLongTokens) {
      for (int32_t rows = kAttnMaxRows; rows > kAttnRows; rows /= 2) {
        const AttnPlan q = plan_of(rows);
        if (q.tasks(a) >= kAttnTasksPerThread * threads) return q;
      }
    }
    return plan_of(kAttnRows);
  };
  auto same_shape = [](const AttentionArgs& x, const AttentionArgs& y) {
    return x.num_tokens == 1 && y.num_tokens == 1 && x.num_heads == y.num_heads &&
           x.num_kv_heads == y.num_kv_heads && x.head_dim == y.head_dim && x.tile == y.tile &&
           x.sliding_window == y.sliding_window && x.kv_dtype == y.kv_dtype &&
           std::memcmp(&x.scale, &y.scale, sizeof(float)) == 0;
  };
  struct Unit {
    size_t arg;
    int nargs;
    AttnPlan plan;
  };
  std::vector<Unit> units;
  std::vector<int64_t> first;
  int64_t work_units = 0;
  for (size_t i = 0; i < count; ++i) {
    const AttentionArgs& a = args[i];
    int64_t keys = 0;
    for (int32_t t = 0; t < a.num_tokens; ++t) keys += a.positions[t] + 1;
    work_units += keys * a.num_heads * a.head_dim * 2;
  }
  // Decode rows join a cross unit only where they share its first row's first
  // block (a common prefix): rows of their own contexts gain nothing from it, and
  // as tasks of their own (one request's KV head each, its tiles in order) 8 such
  // rows × 2,048 keys ran 1.46× faster on the 2-vCPU AVX2 host than in cross tasks,
  // which walk every row's tile t before any row's tile t + 1 (docs/performance.md).
  auto share_prefix = [](const AttentionArgs& x, const AttentionArgs& y) {
    return x.num_tiles > 0 && y.num_tiles > 0 && x.k_tiles[0] == y.k_tiles[0];
  };
  // Modes, first that gives at least two tasks per thread: cross units of decode
  // rows; grouped tasks (each K/V row read once for several query rows); one query
  // head per task (decode of one or two requests, measured faster so).
  for (int mode = 0; mode < 3; ++mode) {
    units.clear();
    first.assign(1, 0);
    for (size_t i = 0; i < count;) {
      Unit u{i, 1, plan_for(args[i], mode < 2)};
      if (mode == 0) {
        const int max_args = kAttnRows / u.plan.hb;
        while (u.nargs < max_args && i + u.nargs < count &&
               same_shape(args[i], args[i + u.nargs]) && share_prefix(args[i], args[i + u.nargs]))
          ++u.nargs;
      }
      const int64_t t = u.nargs > 1 ? args[i].num_heads / u.plan.hb : u.plan.tasks(args[i]);
      units.push_back(u);
      first.push_back(first.back() + t);
      i += u.nargs;
    }
    if (first.back() >= 2 * static_cast<int64_t>(threads)) break;
  }
  const int64_t tasks = first.back();
  const bool avx2 = kernels_use_avx2();
  const bool avx512 = kernels_use_avx512();
  // The buffers' sizes: the widest head, the longest tile's score row (exp_shifted
  // reads whole 8-blocks), the most query rows a task of these units holds.
  int32_t max_hd = 0, max_ts = 8, max_rows = 1;
  for (size_t i = 0; i < count; ++i) {
    max_hd = std::max(max_hd, args[i].head_dim);
    max_ts = std::max(max_ts, (args[i].tile + 7) / 8 * 8 + 8);
  }
  for (const Unit& u : units)
    max_rows = std::max(max_rows, (u.nargs > 1 ? u.nargs : u.plan.qb) * u.plan.hb);
  auto work = [&](int64_t b, int64_t e) {
    // The rows' accumulators, their tile scores, and the tile's K and V copies
    // (attention_fixed).
    std::vector<float> ws(static_cast<size_t>(max_hd) * max_rows);
    std::vector<float> scores(static_cast<size_t>(max_ts) * max_rows);
    std::vector<float> kv(2 * static_cast<size_t>(max_ts) * max_hd);
    float* kp = kv.data();
    float* vp = kp + static_cast<size_t>(max_ts) * max_hd;
    size_t i =
        static_cast<size_t>(std::upper_bound(first.begin(), first.end(), b) - first.begin()) - 1;
    while (b < e) {
      while (first[i + 1] <= b) ++i;
      const int64_t end = std::min(e, first[i + 1]);
      const Unit& u = units[i];
      const AttentionArgs* argv = args + u.arg;
      if (avx512) {
        attention_avx512(argv, u.nargs, u.plan, b - first[i], end - first[i], ws.data(),
                         scores.data(), kp, vp);
      } else if (avx2) {
        attention_avx2(argv, u.nargs, u.plan, b - first[i], end - first[i], ws.data(),
                       scores.data(), kp, vp);
      } else {
        attention_generic(argv, u.nargs, u.plan, b - first[i], end - first[i], ws.data(),
                          scores.data(), kp, vp);
      }
      b = end;
    }
  };
  // Same rule as matmul: score + value work ≈ tasks × keys × head_dim × 2. Tasks
  // differ in cost (a prompt's later tokens attend to more keys), so they are
  // handed out first come, first served, last task first: the costliest start
  // first and the cheapest fill the end (a thread that took the last prompt
  // block late would otherwise finish alone).
  if (pool != nullptr && tasks >= 2 && work_units >= (int64_t{1} << 20)) {
    pool->parallel_dynamic(tasks, std::max<int64_t>(1, tasks / (8 * threads)),
                           [&](int64_t b, int64_t e) { work(tasks - e, tasks - b); });
  } else {
    work(0, tasks);
  }
}

}  // namespace pagedkv::backend::cpu
