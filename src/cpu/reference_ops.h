// The naive reference of every op of nn/backend.h, templated on the scalar
// type: the plainest loops that say what each op computes, next to the fast
// kernels of cpu_backend.cpp. Tests run them in double to check the fast
// fp32 kernels, and check their backward against central finite
// differences. Same shapes and the same += convention as backend.h.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace maestro::ref {

template <class T>
void embedding_forward(T* out, const int32_t* tok, const T* table, int64_t N, int64_t C) {
  for (int64_t i = 0; i < N; ++i)
    for (int64_t c = 0; c < C; ++c) out[i * C + c] = table[tok[i] * C + c];
}
template <class T>
void embedding_backward(T* dtable, const T* dout, const int32_t* tok, int64_t N, int64_t C) {
  for (int64_t i = 0; i < N; ++i)
    for (int64_t c = 0; c < C; ++c) dtable[tok[i] * C + c] += dout[i * C + c];
}

template <class T>
void linear_forward(T* out, const T* inp, const T* w, const T* bias, int64_t N, int64_t C, int64_t OC) {
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < OC; ++o) {
      T s = bias ? bias[o] : T(0);
      for (int64_t c = 0; c < C; ++c) s += inp[n * C + c] * w[o * C + c];
      out[n * OC + o] = s;
    }
}
template <class T>
void linear_backward(T* dinp, T* dw, T* dbias, const T* dout, const T* inp, const T* w, int64_t N, int64_t C,
                     int64_t OC) {
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < OC; ++o) {
      const T g = dout[n * OC + o];
      for (int64_t c = 0; c < C; ++c) {
        if (dinp) dinp[n * C + c] += g * w[o * C + c];
        if (dw) dw[o * C + c] += g * inp[n * C + c];
      }
      if (dbias) dbias[o] += g;
    }
}

template <class T>
void rmsnorm_forward(T* out, T* rstd, const T* x, const T* w, int64_t N, int64_t C, T eps) {
  for (int64_t n = 0; n < N; ++n) {
    T ss = 0;
    for (int64_t c = 0; c < C; ++c) ss += x[n * C + c] * x[n * C + c];
    rstd[n] = T(1) / std::sqrt(ss / T(C) + eps);
    for (int64_t c = 0; c < C; ++c) out[n * C + c] = x[n * C + c] * rstd[n] * w[c];
  }
}
template <class T>
void rmsnorm_backward(T* dx, T* dw, const T* dout, const T* x, const T* w, const T* rstd, int64_t N, int64_t C) {
  for (int64_t n = 0; n < N; ++n) {
    const T r = rstd[n];
    T dot = 0;
    for (int64_t c = 0; c < C; ++c) dot += dout[n * C + c] * w[c] * x[n * C + c];
    for (int64_t c = 0; c < C; ++c) {
      if (dx) dx[n * C + c] += r * dout[n * C + c] * w[c] - r * r * r * dot / T(C) * x[n * C + c];
      if (dw) dw[c] += dout[n * C + c] * x[n * C + c] * r;
    }
  }
}

template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* x, const T* w, const T* b, int64_t N, int64_t C, T eps) {
  for (int64_t n = 0; n < N; ++n) {
    T m = 0, v = 0;
    for (int64_t c = 0; c < C; ++c) m += x[n * C + c];
    m /= T(C);
    for (int64_t c = 0; c < C; ++c) v += (x[n * C + c] - m) * (x[n * C + c] - m);
    v /= T(C);
    mean[n] = m;
    rstd[n] = T(1) / std::sqrt(v + eps);
    for (int64_t c = 0; c < C; ++c) out[n * C + c] = (x[n * C + c] - m) * rstd[n] * w[c] + b[c];
  }
}
template <class T>
void layernorm_backward(T* dx, T* dw, T* db, const T* dout, const T* x, const T* w, const T* mean, const T* rstd,
                        int64_t N, int64_t C) {
  for (int64_t n = 0; n < N; ++n) {
    const T m = mean[n], r = rstd[n];
    T s1 = 0, s2 = 0;
    for (int64_t c = 0; c < C; ++c) {
      const T xh = (x[n * C + c] - m) * r, g = dout[n * C + c] * w[c];
      s1 += g;
      s2 += g * xh;
      if (dw) dw[c] += dout[n * C + c] * xh;
      if (db) db[c] += dout[n * C + c];
    }
    for (int64_t c = 0; c < C; ++c) {
      const T xh = (x[n * C + c] - m) * r;
      if (dx) dx[n * C + c] += r * (dout[n * C + c] * w[c] - s1 / T(C) - xh * s2 / T(C));
    }
  }
}

template <class T>
void rope(T* x, const int32_t* pos, int64_t N, int64_t H, int64_t D, T theta, T sign) {
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < D / 2; ++i) {
        const T a = T(pos[n]) * std::pow(theta, T(-2) * T(i) / T(D));
        const T c = std::cos(a), s = sign * std::sin(a);
        T* r = x + (n * H + h) * D;
        const T x0 = r[i], x1 = r[i + D / 2];
        r[i] = x0 * c - x1 * s;
        r[i + D / 2] = x1 * c + x0 * s;
      }
}

// Attention with the probabilities kept explicitly: probs[h][i][j] per sequence.
template <class T>
void attention_forward(T* out, T* lse, const T* q, const T* k, const T* v, const int32_t* cu, int64_t n_seq,
                       int64_t H, int64_t KV, int64_t D, bool causal) {
  const T sc = T(1) / std::sqrt(T(D));
  for (int64_t s = 0; s < n_seq; ++s)
    for (int64_t i = cu[s]; i < cu[s + 1]; ++i)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t kh = h / (H / KV), end = causal ? i + 1 : cu[s + 1];
        std::vector<T> p;
        T mx = -1e30;
        for (int64_t j = cu[s]; j < end; ++j) {
          T d = 0;
          for (int64_t e = 0; e < D; ++e) d += q[(i * H + h) * D + e] * k[(j * KV + kh) * D + e];
          p.push_back(d * sc);
          mx = std::max(mx, d * sc);
        }
        T sum = 0;
        for (T& x : p) sum += (x = std::exp(x - mx));
        lse[i * H + h] = mx + std::log(sum);
        for (int64_t e = 0; e < D; ++e) {
          T o = 0;
          for (int64_t j = cu[s]; j < end; ++j) o += p[size_t(j - cu[s])] / sum * v[(j * KV + kh) * D + e];
          out[(i * H + h) * D + e] = o;
        }
      }
}
template <class T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v, const T* lse,
                        const int32_t* cu, int64_t n_seq, int64_t H, int64_t KV, int64_t D, bool causal) {
  const T sc = T(1) / std::sqrt(T(D));
  for (int64_t s = 0; s < n_seq; ++s)
    for (int64_t i = cu[s]; i < cu[s + 1]; ++i)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t kh = h / (H / KV), end = causal ? i + 1 : cu[s + 1];
        std::vector<T> p, dp;
        for (int64_t j = cu[s]; j < end; ++j) {
          T d = 0;
          for (int64_t e = 0; e < D; ++e) d += q[(i * H + h) * D + e] * k[(j * KV + kh) * D + e];
          p.push_back(std::exp(d * sc - lse[i * H + h]));
          T g = 0;
          for (int64_t e = 0; e < D; ++e) g += dout[(i * H + h) * D + e] * v[(j * KV + kh) * D + e];
          dp.push_back(g);
        }
        T dsum = 0;
        for (size_t j = 0; j < p.size(); ++j) dsum += p[j] * dp[j];
        for (int64_t j = cu[s]; j < end; ++j) {
          const T pj = p[size_t(j - cu[s])], ds = pj * (dp[size_t(j - cu[s])] - dsum);
          for (int64_t e = 0; e < D; ++e) {
            if (dv) dv[(j * KV + kh) * D + e] += pj * dout[(i * H + h) * D + e];
            if (dq) dq[(i * H + h) * D + e] += ds * sc * k[(j * KV + kh) * D + e];
            if (dk) dk[(j * KV + kh) * D + e] += ds * sc * q[(i * H + h) * D + e];
          }
        }
      }
}

template <class T>
void swiglu_forward(T* out, const T* gate, const T* up, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = gate[i] / (T(1) + std::exp(-gate[i])) * up[i];
}
template <class T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const T sg = T(1) / (T(1) + std::exp(-gate[i]));
    if (dgate) dgate[i] += dout[i] * up[i] * (sg + gate[i] * sg * (T(1) - sg));
    if (dup) dup[i] += dout[i] * gate[i] * sg;
  }
}
template <class T>
T gelu(T x) {
  return T(0.5) * x * (T(1) + std::tanh(std::sqrt(T(2) / T(M_PI)) * (x + T(0.044715) * x * x * x)));
}
template <class T>
void gelu_forward(T* out, const T* inp, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = gelu(inp[i]);
}
template <class T>
void gelu_backward(T* dinp, const T* dout, const T* inp, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const T x = inp[i], k = std::sqrt(T(2) / T(M_PI)), t = std::tanh(k * (x + T(0.044715) * x * x * x));
    dinp[i] += dout[i] * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * k * (T(1) + T(3) * T(0.044715) * x * x));
  }
}

template <class T>
void im2col_patches(T* patches, const T* pixels, int64_t I, int64_t Ch, int64_t S, int64_t p) {
  const int64_t g = S / p;
  for (int64_t img = 0; img < I; ++img)
    for (int64_t py = 0; py < g; ++py)
      for (int64_t px = 0; px < g; ++px)
        for (int64_t c = 0; c < Ch; ++c)
          for (int64_t dy = 0; dy < p; ++dy)
            for (int64_t dx = 0; dx < p; ++dx)
              patches[((img * g + py) * g + px) * Ch * p * p + (c * p + dy) * p + dx] =
                  pixels[((img * Ch + c) * S + py * p + dy) * S + px * p + dx];
}

template <class T>
std::vector<T> log_softmax(const T* x, int64_t V, T temperature) {
  T mx = x[0];
  for (int64_t j = 1; j < V; ++j) mx = std::max(mx, x[j]);
  T sum = 0;
  for (int64_t j = 0; j < V; ++j) sum += std::exp((x[j] - mx) / temperature);
  std::vector<T> out(static_cast<size_t>(V));
  for (int64_t j = 0; j < V; ++j) out[size_t(j)] = (x[j] - mx) / temperature - std::log(sum);
  return out;
}
template <class T>
T cross_entropy(T* dlogits, const T* logits, const int32_t* targets, int64_t N, int64_t V, T scale) {
  T total = 0;
  for (int64_t i = 0; i < N; ++i) {
    if (targets[i] < 0) continue;
    const std::vector<T> lp = log_softmax(logits + i * V, V, T(1));
    total -= lp[size_t(targets[i])];
    if (dlogits)
      for (int64_t j = 0; j < V; ++j) dlogits[i * V + j] += scale * (std::exp(lp[size_t(j)]) - (j == targets[i]));
  }
  return total;
}
template <class T>
T kl_divergence(T* dstudent, const T* student, const T* teacher, const int32_t* targets, int64_t N, int64_t V, T temp,
                T scale) {
  T total = 0;
  for (int64_t i = 0; i < N; ++i) {
    if (targets[i] < 0) continue;
    const std::vector<T> ls = log_softmax(student + i * V, V, temp), lt = log_softmax(teacher + i * V, V, temp);
    for (int64_t j = 0; j < V; ++j) {
      total += temp * temp * std::exp(lt[size_t(j)]) * (lt[size_t(j)] - ls[size_t(j)]);
      if (dstudent) dstudent[i * V + j] += scale * temp * (std::exp(ls[size_t(j)]) - std::exp(lt[size_t(j)]));
    }
  }
  return total;
}

template <class T>
void adamw(T* p, const T* g, T* m, T* v, size_t n, T lr, T b1, T b2, T eps, T wd, int64_t t) {
  for (size_t i = 0; i < n; ++i) {
    p[i] -= lr * wd * p[i];
    m[i] = b1 * m[i] + (1 - b1) * g[i];
    v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
    p[i] -= lr * (m[i] / (1 - std::pow(b1, T(t)))) / (std::sqrt(v[i] / (1 - std::pow(b2, T(t)))) + eps);
  }
}

}  // namespace maestro::ref
