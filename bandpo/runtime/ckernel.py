"""The sampler's attention step in C: one call per layer and decoded token (``sampler_kernel: c``).

`bandpo.runtime.fastlm.FastLlama.decode` spends most of a token's time in PyTorch operations too small to pay for
their dispatch (rotary embedding, the cache write, two tiny batched products per part, a softmax over the joined
parts, per layer and token). `attention` does the same arithmetic in one C function, for each cache row ``r`` and
head ``h`` (``D`` = head_dim, ``P`` the padded prompt length, ``col`` the token's completion column):

    q = rope(x_q) * D^-1/2;  k = rope(x_k);  cache_k[r, c, col] = k;  cache_v[r, c, col] = x_v
    s_j = q . K_prompt[g, c, j] + bias[r, j]   (j < P: the prompt g = slots[r] // n, its keys held once per prompt)
    s_{P+j} = q . cache_k[r, c, j]             (j <= col: the row's own completion)
    out[r, h] = sum_j softmax(s)_j V_j

with c = h // (H / K) the key / value head of query head h (grouped-query attention, K key / value heads for H
query heads; c = h where K = H; each cache column written once per key / value head),
rope(x)_d = x_d cos_d + x_{(d + D/2) mod D} sin_d (``sin`` carrying rotate_half's sign, as `FastLlama`), the
prompt's leading padding (bias -inf) left out. The cache write is the PyTorch path's to the bit; the output equals
it up to float rounding (about 3e-7 relative; tests/unit/test_ckernel.py), not bit for bit, so the setting changes
a run's numbers and is a recipe's choice, checked by ``benchmarks/bench_recipe_check.py``.

Same bits on any x86-64 CPU: the library is compiled for the x86-64 baseline (SSE2 intrinsics, ``-march=x86-64``)
with floating-point contraction off, so no FMA and no reassociation; every sum runs in an order fixed by the code
(dot products: four lanes over d, then (l0 + l2) + (l1 + l3), for one key or four at a time alike; weighted sums:
keys in order, even and odd positions in two sums added at the end); ``exp`` is the code's own (Cody-Waite
reduction and Cephes' expf polynomial for e^r, about 1 ulp), not the C library's, which varies between libc
versions. One thread. Built once per source and flags into ``$BANDPO_CACHE_DIR`` (`bandpo.core.numerics.build_library`);
x86-64 CPUs only, float32 tensors on the CPU.
"""

from __future__ import annotations

import ctypes
import functools
import platform

import torch

from bandpo.core import numerics
from bandpo.core.protocol import SAMPLER_KERNELS

__all__ = ["KERNELS", "SOURCE", "attention", "check"]

KERNELS = SAMPLER_KERNELS  # the training setting sampler_kernel (bandpo.core.protocol)
"""The values of ``sampler_kernel``: PyTorch operations (`FastLlama.decode`), or this module's C function."""

MAX_HEAD_DIM = 256
FLAGS = ("-O2", "-march=x86-64", "-mtune=generic", "-ffp-contract=off", "-fno-fast-math")

SOURCE = r"""
#include <emmintrin.h>
#include <stdint.h>
#include <math.h>

#define MAXD 256

/* e^x on 4 lanes for x <= 0: x = k ln2 + r (Cody-Waite: ln2 in two parts), e^r by Cephes' expf polynomial,
   2^k through the exponent bits; 0 below -87 (and for -inf) */
static inline __m128 exp4(__m128 x) {
    const __m128 lo = _mm_set1_ps(-87.0f);
    const __m128 under = _mm_cmplt_ps(x, lo);
    x = _mm_max_ps(x, lo);
    const __m128i k = _mm_cvtps_epi32(_mm_mul_ps(x, _mm_set1_ps(1.44269504088896341f)));
    const __m128 kf = _mm_cvtepi32_ps(k);
    __m128 r = _mm_sub_ps(x, _mm_mul_ps(kf, _mm_set1_ps(0.693359375f)));
    r = _mm_sub_ps(r, _mm_mul_ps(kf, _mm_set1_ps(-2.12194440e-4f)));
    __m128 p = _mm_set1_ps(1.9875691500e-4f);
    p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(1.3981999507e-3f));
    p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(8.3334519073e-3f));
    p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(4.1665795894e-2f));
    p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(1.6666665459e-1f));
    p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(5.0000001201e-1f));
    p = _mm_add_ps(_mm_add_ps(_mm_mul_ps(p, _mm_mul_ps(r, r)), r), _mm_set1_ps(1.0f));
    const __m128i e = _mm_slli_epi32(_mm_add_epi32(k, _mm_set1_epi32(127)), 23);
    return _mm_andnot_ps(under, _mm_mul_ps(p, _mm_castsi128_ps(e)));
}

/* q . k: lane l sums d = l, l + 4, ... in order, then (l0 + l2) + (l1 + l3) */
static inline float dot1(const float *q, const float *k, int64_t D) {
    __m128 a = _mm_mul_ps(_mm_loadu_ps(q), _mm_loadu_ps(k));
    for (int64_t d = 4; d < D; d += 4) a = _mm_add_ps(a, _mm_mul_ps(_mm_loadu_ps(q + d), _mm_loadu_ps(k + d)));
    const __m128 s = _mm_add_ps(a, _mm_movehl_ps(a, a));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 0x55)));
}

/* q against 4 consecutive keys, each summed exactly as dot1 does */
static inline __m128 dot4(const float *q, const float *k, int64_t D) {
    const float *k1 = k + D, *k2 = k1 + D, *k3 = k2 + D;
    __m128 qd = _mm_loadu_ps(q);
    __m128 a0 = _mm_mul_ps(qd, _mm_loadu_ps(k)), a1 = _mm_mul_ps(qd, _mm_loadu_ps(k1));
    __m128 a2 = _mm_mul_ps(qd, _mm_loadu_ps(k2)), a3 = _mm_mul_ps(qd, _mm_loadu_ps(k3));
    for (int64_t d = 4; d < D; d += 4) {
        qd = _mm_loadu_ps(q + d);
        a0 = _mm_add_ps(a0, _mm_mul_ps(qd, _mm_loadu_ps(k + d)));
        a1 = _mm_add_ps(a1, _mm_mul_ps(qd, _mm_loadu_ps(k1 + d)));
        a2 = _mm_add_ps(a2, _mm_mul_ps(qd, _mm_loadu_ps(k2 + d)));
        a3 = _mm_add_ps(a3, _mm_mul_ps(qd, _mm_loadu_ps(k3 + d)));
    }
    _MM_TRANSPOSE4_PS(a0, a1, a2, a3); /* a_l now holds lane l of the four keys */
    return _mm_add_ps(_mm_add_ps(a0, a2), _mm_add_ps(a1, a3));
}

/* s[j] = q . keys[j], j < m */
static inline void scores(const float *q, const float *keys, int64_t m, int64_t D, float *s) {
    int64_t j = 0;
    for (; j + 4 <= m; j += 4) _mm_storeu_ps(s + j, dot4(q, keys + j * D, D));
    for (; j < m; j++) s[j] = dot1(q, keys + j * D, D);
}

/* out = inv * (sum_j w1[j] v1[j] over j < m1, then sum_j w2[j] v2[j] over j < m2) on the nv x 4 lanes of d from
   v1, v2, out: keys in order, even and odd positions of each part in two sums (e, o) added at the end, held in
   registers */
static inline void wsum(const float *w1, const float *v1, int64_t m1, const float *w2, const float *v2, int64_t m2,
                        int64_t D, float inv, float *out, const int nv) {
    __m128 e[4], o[4];
#pragma GCC unroll 4
    for (int k = 0; k < nv; k++) e[k] = o[k] = _mm_setzero_ps();
    for (int part = 0; part < 2; part++) {
        const float *w = part ? w2 : w1, *v = part ? v2 : v1;
        const int64_t m = part ? m2 : m1;
        int64_t j = 0;
        for (; j + 2 <= m; j += 2) {
            const __m128 a = _mm_set1_ps(w[j]), b = _mm_set1_ps(w[j + 1]);
            const float *va = v + j * D, *vb = va + D;
#pragma GCC unroll 4
            for (int k = 0; k < nv; k++) {
                e[k] = _mm_add_ps(e[k], _mm_mul_ps(a, _mm_loadu_ps(va + 4 * k)));
                o[k] = _mm_add_ps(o[k], _mm_mul_ps(b, _mm_loadu_ps(vb + 4 * k)));
            }
        }
        if (j < m) {
            const __m128 a = _mm_set1_ps(w[j]);
#pragma GCC unroll 4
            for (int k = 0; k < nv; k++) e[k] = _mm_add_ps(e[k], _mm_mul_ps(a, _mm_loadu_ps(v + j * D + 4 * k)));
        }
    }
    const __m128 scale = _mm_set1_ps(inv);
#pragma GCC unroll 4
    for (int k = 0; k < nv; k++) _mm_storeu_ps(out + 4 * k, _mm_mul_ps(_mm_add_ps(e[k], o[k]), scale));
}

/* wsum over all of d: 16 lanes at a time, then 4 */
static void weighted(const float *w1, const float *v1, int64_t m1, const float *w2, const float *v2, int64_t m2,
                     int64_t D, float inv, float *out) {
    int64_t d = 0;
    for (; d + 16 <= D; d += 16) wsum(w1, v1 + d, m1, w2, v2 + d, m2, D, inv, out + d, 4);
    for (; d < D; d += 4) wsum(w1, v1 + d, m1, w2, v2 + d, m2, D, inv, out + d, 1);
}

/* See the Python module's docstring. qkv (b, H + 2K, D): H query heads, K key heads, K value heads (K divides H:
   query head h reads key / value head h / (H / K)); cosr, sinr (b, D); pk, pv (G, K, P, D); pbias (b, P);
   slots (b); ck, cv (b, K, T, D); s: P + T + 4 floats of scratch; out (b, H, D). Returns 1 on bad sizes. */
int bandpo_decode_attention(int64_t b, int64_t H, int64_t K, int64_t D, int64_t P, int64_t T, int64_t col,
                            int64_t n, const float *qkv, const float *cosr, const float *sinr, const float *pk,
                            const float *pv, const float *pbias, const int64_t *slots, float *ck, float *cv,
                            float scale, float *s, float *out) {
    if (D < 4 || D % 4 || D > MAXD || col < 0 || col >= T || n < 1 || K < 1 || H % K) return 1;
    const int64_t half = D / 2, L = P + col + 1, L4 = (L + 3) & ~(int64_t)3, per = H / K, W = H + 2 * K;
    float q[MAXD];
    for (int64_t r = 0; r < b; r++) {
        const int64_t g = slots[r] / n;
        const float *c = cosr + r * D, *sn = sinr + r * D, *bias = pbias + r * P;
        for (int64_t h = 0; h < H; h++) {
            const int64_t kh = h / per; /* its key / value head */
            const float *xq = qkv + (r * W + h) * D;
            float *kc = ck + (r * K + kh) * T * D, *vc = cv + (r * K + kh) * T * D;
            if (h % per == 0) { /* the key / value head's first query head writes its cache column */
                const float *xk = qkv + (r * W + H + kh) * D, *xv = xk + K * D;
                for (int64_t d = 0; d < D; d++) { /* rope as FastLlama: x * cos + roll(x, D/2) * sin */
                    const int64_t e = d < half ? d + half : d - half;
                    kc[col * D + d] = xk[d] * c[d] + xk[e] * sn[d];
                    vc[col * D + d] = xv[d];
                }
            }
            for (int64_t d = 0; d < D; d++) {
                const int64_t e = d < half ? d + half : d - half;
                q[d] = (xq[d] * c[d] + xq[e] * sn[d]) * scale;
            }
            const float *pkh = pk + (g * K + kh) * P * D, *pvh = pv + (g * K + kh) * P * D;
            int64_t j0 = 0; /* the prompt's leading padding */
            while (j0 < P && bias[j0] == -INFINITY) s[j0++] = -INFINITY;
            scores(q, pkh + j0 * D, P - j0, D, s + j0);
            scores(q, kc, col + 1, D, s + P);
            for (int64_t j = L; j < L4; j++) s[j] = -INFINITY;
            int64_t j = j0;
            for (; j + 4 <= P; j += 4) _mm_storeu_ps(s + j, _mm_add_ps(_mm_loadu_ps(s + j), _mm_loadu_ps(bias + j)));
            for (; j < P; j++) s[j] += bias[j];
            __m128 m4 = _mm_set1_ps(-INFINITY);
            for (j = 0; j < L4; j += 4) m4 = _mm_max_ps(m4, _mm_loadu_ps(s + j));
            m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
            const __m128 mx = _mm_set1_ps(_mm_cvtss_f32(_mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 0x55))));
            __m128 sum4 = _mm_setzero_ps();
            for (j = 0; j < L4; j += 4) {
                const __m128 e4 = exp4(_mm_sub_ps(_mm_loadu_ps(s + j), mx));
                _mm_storeu_ps(s + j, e4);
                sum4 = _mm_add_ps(sum4, e4);
            }
            const __m128 t = _mm_add_ps(sum4, _mm_movehl_ps(sum4, sum4));
            const float inv = 1.0f / _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 0x55)));
            weighted(s + j0, pvh + j0 * D, P - j0, s + P, vc, col + 1, D, inv, out + (r * H + h) * D);
        }
    }
    return 0;
}
"""


def check(kernel: str) -> None:
    """ValueError unless ``kernel`` is one of `KERNELS`; for ``c``, RuntimeError where it cannot run here (not an
    x86-64 CPU, no C compiler). Builds the library once."""
    if kernel not in KERNELS:
        raise ValueError(f"sampler_kernel: must be one of {', '.join(KERNELS)}, got {kernel!r}")
    if kernel == "c":
        _function()


@functools.cache
def _function():
    if platform.machine().lower() not in ("x86_64", "amd64"):
        raise RuntimeError(f"sampler_kernel: c runs on x86-64 CPUs only, not {platform.machine()}: use torch")
    path = numerics.build_library("libbandpo-decode", SOURCE, FLAGS, purpose="sampler_kernel: c (bandpo.models."
                                  "ckernel)", instead="use sampler_kernel: torch")  # fmt: skip
    f = ctypes.CDLL(str(path)).bandpo_decode_attention
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    f.argtypes = [i64] * 8 + [ptr] * 9 + [ctypes.c_float, ptr, ptr]
    f.restype = ctypes.c_int
    return f


def attention(qkv, cos, sin, prompt_k, prompt_v, prompt_bias, slots, n: int, cache_k, cache_v, col: int,
              scale: float, scratch: torch.Tensor, check: bool = True) -> torch.Tensor:  # fmt: skip
    """The attention output (b, H, D) of one decoded token per cache row (see the module's docstring); writes the
    token's key and value into column ``col`` of ``cache_k`` / ``cache_v``.

    ``qkv`` (b, H + 2K, D): the projections before rope, H query heads then K key and K value heads (K =
    ``cache_k.shape[1]``; grouped-query attention where K < H: query head h reads key / value head h // (H / K));
    with K = H also (b, 3, H, D); ``cos`` / ``sin`` (b, D): each row's rope rows; ``prompt_k`` / ``prompt_v`` (G, K,
    P, D); ``prompt_bias`` (b, P) (or (b, 1, P)), 0 or -inf; ``slots`` (b,) int64: the batch row of each cache row
    (its prompt is ``slots // n``); ``cache_k`` / ``cache_v`` (b, K, T, D); ``scratch``: at least P + T + 4 floats.
    All float32 (slots int64), contiguous, on the CPU: checked, since the C function trusts its pointers.
    ``check=False`` skips the checks (about 15 us) for a call whose tensors are, in shape, type and layout, those of
    the checked call before it with the same ``slots`` and ``col`` (the later layers of one decoded token)."""
    if check:
        _check(qkv, cos, sin, prompt_k, prompt_v, prompt_bias, slots, n, cache_k, cache_v, col, scratch)
    b, D, K = qkv.shape[0], qkv.shape[-1], cache_k.shape[1]
    H = qkv.shape[2] if qkv.dim() == 4 else qkv.shape[1] - 2 * K
    P, T = prompt_k.shape[2], cache_k.shape[2]
    out = qkv.new_empty(b, H, D)
    rc = _function()(b, H, K, D, P, T, col, n, qkv.data_ptr(), cos.data_ptr(), sin.data_ptr(), prompt_k.data_ptr(),
                     prompt_v.data_ptr(), prompt_bias.data_ptr(), slots.data_ptr(), cache_k.data_ptr(),
                     cache_v.data_ptr(), scale, scratch.data_ptr(), out.data_ptr())  # fmt: skip
    if rc != 0:
        raise ValueError(f"ckernel.attention: the C function refused the sizes (head_dim {D}, column {col} of {T})")
    return out


def _check(qkv, cos, sin, prompt_k, prompt_v, prompt_bias, slots, n, cache_k, cache_v, col, scratch) -> None:
    if qkv.dim() not in (3, 4) or prompt_k.dim() != 4 or cache_k.dim() != 4:
        raise ValueError("ckernel.attention: the prompt keys and the cache must be 4-d, qkv 3-d (or 4-d)")
    b, D, K = qkv.shape[0], qkv.shape[-1], cache_k.shape[1]
    if qkv.dim() == 4:  # (b, 3, H, D): K = H
        H, ok = qkv.shape[2], qkv.shape[1] == 3 and K == qkv.shape[2]
    else:  # (b, H + 2K, D)
        H = qkv.shape[1] - 2 * K
        ok = H >= K and H % K == 0
    G, _, P, _ = prompt_k.shape
    T = cache_k.shape[2]
    tensors = (qkv, cos, sin, prompt_k, prompt_v, prompt_bias, cache_k, cache_v, scratch)
    if not ok or D > MAX_HEAD_DIM or D % 4 or cache_k.shape != (b, K, T, D) or cache_v.shape != cache_k.shape:
        raise ValueError(f"ckernel.attention: qkv {tuple(qkv.shape)}, cache {tuple(cache_k.shape)}: bad shapes")
    if (cos.shape != (b, D) or sin.shape != (b, D) or prompt_v.shape != prompt_k.shape or prompt_k.shape[1] != K
            or prompt_k.shape[3] != D or prompt_bias.numel() != b * P or slots.shape != (b,)
            or scratch.numel() < P + T + 4):  # fmt: skip
        raise ValueError("ckernel.attention: the rope rows, prompt keys, bias, slots or scratch do not fit qkv")
    if not all(t.dtype == torch.float32 and t.is_contiguous() and t.device.type == "cpu" for t in tensors) or not (
        slots.dtype == torch.int64 and slots.is_contiguous() and slots.device.type == "cpu"
    ):
        raise ValueError("ckernel.attention: needs contiguous float32 CPU tensors (slots: int64)")
    if not 0 <= col < T or b and not 0 <= int(slots.min()) <= int(slots.max()) < G * n:
        raise ValueError(f"ckernel.attention: column {col} of {T}, or a slot beyond {G} prompts x {n}")
