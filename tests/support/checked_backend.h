// CheckedBackend: the CPU backend behind nn/backend.h's memory contract, as
// a GPU backend enforces it. On the CPU backend host and backend memory are
// the same, so an engine that hands a host span to a compute op (or a
// backend buffer to copy_from_host as its host side, or a backend buffer as
// an index array) works here and faults on a GPU. This wrapper remembers
// every block it allocated and throws std::logic_error, naming the op and
// the argument, when a compute op gets memory outside them (or an extent
// past a block's end), or a host-side argument (copy sources and targets on
// the host, index arrays) points into them. Tests run models on it to catch
// that class of bug on the CPU. Gradient outputs may be null (not wanted),
// as nn/backend.h allows.
//
// It also wants the linear operands' bf16 copies (Backend::wants_bf16_operands),
// as a backend with bf16 GEMMs does, and checks each one a linear op gets
// against its fp32 values element by element — a stale copy (parameters or
// an activation written after it was made) throws std::logic_error naming
// the op and operand — then computes in fp32, like the CPU backend. Made
// with bf16_alone, it stands for bf16 GEMMs as the CUDA backend's are: its
// linear ops compute from their operands rounded to bf16 (and widened back,
// so results move by bf16 rounding), and it says that the copies suffice
// (Backend::bf16_operands_suffice): an operand may then come as its copy
// alone (a linear op's, or the input of rope, swiglu or the attention,
// which then compute from it widened), and an op may be asked for its
// output in bf16 alone (Out, GradOut); without bf16_alone, either is a
// std::logic_error. Every bf16 output is filled with bf16 NaN before the
// op runs, so one left unwritten shows.
// A gradient an op is to overwrite (nn/backend.h's Grad) is filled with NaN
// before the op runs, so a read of its old contents shows in the results;
// so is the bf16 copy AdamW is to write (Backend::adamw's p16).
//
// A held upload's source may be device memory: another backend's (a
// resident hand-off: another CheckedBackend's blocks stand for another
// GPU's) or, within a block's extent, this one's (a sum of fan-in
// gradients) — the CUDA backend tells device memory from host memory there.
//
// And it checks copy_from_host_held's promise as the CUDA backend needs it,
// which reads a source in pinned memory (transport/pinned_ranges.h) later,
// by DMA: its fences pass only at a copy_to_host (the sync), and there,
// before anything else, every pinned source held since the last sync must
// still hold the bytes it had when handed over — one let go too early (its
// block reused by the transport) throws std::logic_error naming it. Other
// memory is read before the call returns, as the CUDA backend does.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cpu/cpu_backend.h"
#include "nn/backend.h"
#include "transport/pinned_ranges.h"

namespace maestro::test_support {

class CheckedBackend final : public Backend {
 public:
  explicit CheckedBackend(int threads = 1, bool bf16_alone = false)
      : Backend(Device::Cuda), b_(make_cpu_backend(threads)), bf16_alone_(bf16_alone) {}
  const char* name() const override { return "checked"; }

  // The memory of the GPU it stands for (1 GiB unless a test says).
  size_t device_memory_bytes() const override { return device_memory_; }
  void set_device_memory_bytes(size_t bytes) { device_memory_ = bytes; }
  void* allocate(size_t n, DType d) override { return track(b_->allocate(n, d), std::max<size_t>(n, 1) * dtype_size(d)); }
  double* allocate_scalars(size_t n) override {
    return static_cast<double*>(track(b_->allocate_scalars(n), std::max<size_t>(n, 1) * sizeof(double)));
  }
  void release(void* p) override {
    {
      std::lock_guard lock(mu_);
      if (!blocks_.erase(static_cast<const char*>(p))) throw std::logic_error("release of memory this backend did not allocate");
    }
    b_->release(p);
  }
  void copy_from_host(void* d, const void* s, size_t n) override {
    dev("copy_from_host", "dst", d, n), host("copy_from_host", "host_src", s);
    b_->copy_from_host(d, s, n);
  }
  void copy_to_host(void* d, const void* s, size_t n) override {
    host("copy_to_host", "host_dst", d), dev("copy_to_host", "src", s, n);
    check_held();
    b_->copy_to_host(d, s, n);
  }
  void copy_from_host_held(void* d, const void* s, size_t n) override {
    dev("copy_from_host_held", "dst", d, n);
    if (holds(s)) dev("copy_from_host_held", "host_src", s, n);  // device to device, as the CUDA backend copies it
    b_->copy_from_host(d, s, n);
    if (n == 0 || !pinned_host_ranges().covers(s, n)) return;
    std::lock_guard lock(mu_);
    const auto* bytes = static_cast<const char*>(s);
    held_.push_back({bytes, std::string(bytes, n)});
  }
  // The slowest GPU allowed: work is done only when a sync waited for it.
  uint64_t fence() override { return syncs_; }
  bool passed(uint64_t fence) override { return syncs_ > fence; }
  int64_t held_uploads() const { return held_uploads_; }  // held pinned sources checked at a sync so far
  // Resident hand-offs (actors/section_runner.h): a fresh marker each time;
  // the waits for one are counted. Whether p lies in this backend's memory.
  std::shared_ptr<void> ready_marker() override { return std::make_shared<int>(0); }
  void wait_for(const std::shared_ptr<void>& marker) override { waits_ += marker != nullptr; }
  int64_t waits() const { return waits_; }
  bool holds(const void* p) const {
    std::lock_guard lock(mu_);
    return block_of(p) != blocks_.end();
  }
  void convert(void* d, DType dd, const void* s, DType sd, size_t n) override {
    dev("convert", "dst", d, n * dtype_size(dd)), dev("convert", "src", s, n * dtype_size(sd));
    ++converts_;
    b_->convert(d, dd, s, sd, n);
  }
  void zero(float* p, size_t n) override { f("zero", "p", p, n), b_->zero(p, n); }
  void zero_scalars(double* p, size_t n) override { dev("zero_scalars", "p", p, n * 8), b_->zero_scalars(p, n); }
  void copy(float* d, const float* s, size_t n) override { f("copy", "dst", d, n), f("copy", "src", s, n), b_->copy(d, s, n); }
  void add(float* o, const float* a, const float* b, size_t n) override {
    f("add", "out", o, n), f("add", "a", a, n), f("add", "b", b, n), b_->add(o, a, b, n);
  }
  void accumulate(float* d, const float* s, size_t n) override {
    f("accumulate", "dst", d, n), f("accumulate", "src", s, n), b_->accumulate(d, s, n);
  }
  void scale(float* p, float s, size_t n) override { f("scale", "p", p, n), b_->scale(p, s, n); }
  void sq_norm(double* o, const float* p, size_t n) override {
    dev("sq_norm", "out", o, 8), f("sq_norm", "p", p, n), b_->sq_norm(o, p, n);
  }
  void embedding_forward(float* o, const int32_t* t, const float* tb, int64_t N, int64_t C) override {
    f("embedding_forward", "out", o, N * C), host("embedding_forward", "tokens", t), f("embedding_forward", "table", tb, C);
    b_->embedding_forward(o, t, tb, N, C);
  }
  void embedding_backward(float* d, const float* o, const int32_t* t, int64_t N, int64_t C) override {
    opt("embedding_backward", "dtable", d, C), f("embedding_backward", "dout", o, N * C);
    host("embedding_backward", "tokens", t);
    b_->embedding_backward(d, o, t, N, C);
  }
  bool wants_bf16_operands() const override { return true; }
  bool bf16_operands_suffice() const override { return bf16_alone_; }
  void linear_forward(Out o, Operand i, Operand w, const float* b, int64_t N, int64_t C, int64_t OC) override {
    out("linear_forward", "out", o, N * OC), opt("linear_forward", "bias", b, OC);
    const float* in = operand("linear_forward", "inp", i, N * C, 0);
    b_->linear_forward(o, in, operand("linear_forward", "w", w, OC * C, 1), b, N, C, OC);
  }
  void linear_backward(Grad di, Grad dw, float* db, Operand d, Operand i, Operand w, int64_t N, int64_t C,
                       int64_t OC) override {
    grad("linear_backward", "dinp", di, N * C), grad("linear_backward", "dw", dw, OC * C);
    opt("linear_backward", "dbias", db, OC);
    if (db && !d.f32) throw std::logic_error("linear_backward: dbias with no fp32 dout");
    const float* dy = operand("linear_backward", "dout", d, N * OC, 2);
    // inp is read by the dw GEMM only, w by the dinp GEMM only
    const float* in = dw.p ? operand("linear_backward", "inp", i, N * C, 0) : nullptr;
    const float* wt = di.p ? operand("linear_backward", "w", w, OC * C, 1) : nullptr;
    b_->linear_backward(di, dw, db, dy, in, wt, N, C, OC);
  }
  // Operands that linear ops got with a bf16 copy (each checked current).
  int64_t bf16_copy_uses() const { return bf16_copy_uses_; }
  int64_t converts() const { return converts_; }  // convert() calls
  int64_t overwrites() const { return overwrites_; }  // gradient outputs handed over to be overwritten
  int64_t adamw_copies() const { return adamw_copies_; }  // AdamW steps that wrote the parameters' bf16 copy
  int64_t bf16_outputs() const { return bf16_outputs_; }  // activation outputs asked for with a bf16 copy (Out, GradOut)
  int64_t bf16_alone_uses() const { return bf16_alone_uses_; }  // linear operands given as their bf16 copy alone
  int64_t bf16_alone_inputs() const { return bf16_alone_inputs_; }  // rope's, swiglu's, the attention's, the same
  void rmsnorm_forward(Out o, float* r, const float* i, const float* w, int64_t N, int64_t C, float e) override {
    out("rmsnorm_forward", "out", o, N * C), f("rmsnorm_forward", "rstd", r, N), f("rmsnorm_forward", "inp", i, N * C);
    f("rmsnorm_forward", "w", w, C);
    b_->rmsnorm_forward(o, r, i, w, N, C, e);
  }
  void rmsnorm_backward(float* di, float* dw, const float* d, const float* i, const float* w, const float* r, int64_t N,
                        int64_t C) override {
    opt("rmsnorm_backward", "dinp", di, N * C), opt("rmsnorm_backward", "dw", dw, C), f("rmsnorm_backward", "dout", d, N * C);
    f("rmsnorm_backward", "inp", i, N * C), f("rmsnorm_backward", "w", w, C), f("rmsnorm_backward", "rstd", r, N);
    b_->rmsnorm_backward(di, dw, d, i, w, r, N, C);
  }
  void layernorm_forward(Out o, float* m, float* r, const float* i, const float* w, const float* b, int64_t N,
                         int64_t C, float e) override {
    out("layernorm_forward", "out", o, N * C), f("layernorm_forward", "mean", m, N), f("layernorm_forward", "rstd", r, N);
    f("layernorm_forward", "inp", i, N * C), f("layernorm_forward", "w", w, C), f("layernorm_forward", "b", b, C);
    b_->layernorm_forward(o, m, r, i, w, b, N, C, e);
  }
  void layernorm_backward(float* di, float* dw, float* db, const float* d, const float* i, const float* w,
                          const float* m, const float* r, int64_t N, int64_t C) override {
    opt("layernorm_backward", "dinp", di, N * C), opt("layernorm_backward", "dw", dw, C);
    opt("layernorm_backward", "db", db, C), f("layernorm_backward", "dout", d, N * C);
    f("layernorm_backward", "inp", i, N * C), f("layernorm_backward", "w", w, C);
    f("layernorm_backward", "mean", m, N), f("layernorm_backward", "rstd", r, N);
    b_->layernorm_backward(di, dw, db, d, i, w, m, r, N, C);
  }
  void rope_forward(Out o, Operand x, const int32_t* p, int64_t N, int64_t H, int64_t D, float t) override {
    input("rope_forward", "x", x, N * H * D), host("rope_forward", "pos", p);
    std::vector<float> kept;  // x in bf16 alone, rotated in place: read before out is filled with NaN
    if (!x.f32 && x.bf16 == o.bf16) {
      const auto* c = static_cast<const uint16_t*>(x.bf16);
      for (int64_t k = 0; k < N * H * D; ++k) kept.push_back(bf16_to_float(c[k]));
      x = Operand(kept.data());
    }
    out("rope_forward", "out", o, N * H * D);
    b_->rope_forward(o, x, p, N, H, D, t);
  }
  void rope_backward(Out o, const float* x, const int32_t* p, int64_t N, int64_t H, int64_t D, float t) override {
    f("rope_backward", "dx", x, N * H * D), host("rope_backward", "pos", p), out("rope_backward", "out", o, N * H * D);
    b_->rope_backward(o, x, p, N, H, D, t);
  }
  // q, k, v: fp32, each copy (when given) checked current, or in bf16 alone; fp32 attention either way.
  void attention_forward(float* o, float* l, Operand q, Operand k, Operand v, const int32_t* cu, int64_t ns, int64_t N,
                         int64_t H, int64_t KV, int64_t D, bool c) override {
    f("attention_forward", "out", o, N * H * D), f("attention_forward", "lse", l, N * H);
    qkv("attention_forward", q, k, v, N * H * D, N * KV * D), host("attention_forward", "cu_seqlens", cu);
    b_->attention_forward(o, l, q, k, v, cu, ns, N, H, KV, D, c);
  }
  void attention_backward(Grad dq, Grad dk, Grad dv, const float* d, const float* o, const float* l, Operand q,
                          Operand k, Operand v, const int32_t* cu, int64_t ns, int64_t N, int64_t H, int64_t KV,
                          int64_t D, bool c) override {
    grad("attention_backward", "dq", dq, N * H * D), grad("attention_backward", "dk", dk, N * KV * D);
    grad("attention_backward", "dv", dv, N * KV * D), f("attention_backward", "dout", d, N * H * D);
    f("attention_backward", "out", o, N * H * D), f("attention_backward", "lse", l, N * H);
    qkv("attention_backward", q, k, v, N * H * D, N * KV * D), host("attention_backward", "cu_seqlens", cu);
    b_->attention_backward(dq, dk, dv, d, o, l, q, k, v, cu, ns, N, H, KV, D, c);
  }
  void swiglu_forward(Out o, Operand g, Operand u, size_t n) override {
    input("swiglu_forward", "gate", g, int64_t(n)), input("swiglu_forward", "up", u, int64_t(n));
    out("swiglu_forward", "out", o, int64_t(n));
    b_->swiglu_forward(o, g, u, n);
  }
  void swiglu_backward(GradOut dg, GradOut du, const float* d, Operand g, Operand u, size_t n) override {
    grad("swiglu_backward", "dgate", dg, int64_t(n)), grad("swiglu_backward", "dup", du, int64_t(n));
    f("swiglu_backward", "dout", d, n);
    input("swiglu_backward", "gate", g, int64_t(n)), input("swiglu_backward", "up", u, int64_t(n));
    b_->swiglu_backward(dg, du, d, g, u, n);
  }
  void gelu_forward(Out o, const float* i, size_t n) override {
    out("gelu_forward", "out", o, int64_t(n)), f("gelu_forward", "inp", i, n), b_->gelu_forward(o, i, n);
  }
  void gelu_backward(GradOut di, const float* d, const float* i, size_t n) override {
    grad("gelu_backward", "dinp", di, int64_t(n)), f("gelu_backward", "dout", d, n), f("gelu_backward", "inp", i, n);
    b_->gelu_backward(di, d, i, n);
  }
  void relu_forward(float* o, const float* i, size_t n) override {
    f("relu_forward", "out", o, n), f("relu_forward", "inp", i, n), b_->relu_forward(o, i, n);
  }
  void relu_backward(Grad di, const float* d, const float* i, size_t n) override {
    grad("relu_backward", "dinp", di, int64_t(n)), f("relu_backward", "dout", d, n), f("relu_backward", "inp", i, n);
    b_->relu_backward(di, d, i, n);
  }
  void im2col_patches(float* p, const float* x, int64_t I, int64_t Ch, int64_t S, int64_t ps) override {
    f("im2col_patches", "patches", p, I * Ch * (S / ps) * (S / ps) * ps * ps), f("im2col_patches", "pixels", x, I * Ch * S * S);
    b_->im2col_patches(p, x, I, Ch, S, ps);
  }
  void cross_entropy(double* l, float* d, const float* x, const int32_t* t, int64_t N, int64_t V, float s) override {
    dev("cross_entropy", "loss", l, 8), opt("cross_entropy", "dlogits", d, N * V), f("cross_entropy", "logits", x, N * V);
    host("cross_entropy", "targets", t);
    b_->cross_entropy(l, d, x, t, N, V, s);
  }
  void kl_divergence(double* l, float* d, const float* s, const float* t, const int32_t* tg, int64_t N, int64_t V,
                     float T, float sc) override {
    dev("kl_divergence", "loss", l, 8), opt("kl_divergence", "dstudent", d, N * V);
    f("kl_divergence", "student", s, N * V), f("kl_divergence", "teacher", t, N * V), host("kl_divergence", "targets", tg);
    b_->kl_divergence(l, d, s, t, tg, N, V, T, sc);
  }
  void shard_row_max(float* mx, const float* x, int64_t N, int64_t V, int64_t va, float it) override {
    f("shard_row_max", "mx", mx, N), f("shard_row_max", "x", x, N * V), b_->shard_row_max(mx, x, N, V, va, it);
  }
  void max_of_parts(float* mx, const float* p, int64_t R, int64_t N) override {
    f("max_of_parts", "mx", mx, N), f("max_of_parts", "parts", p, R * N), b_->max_of_parts(mx, p, R, N);
  }
  void shard_sumexp(float* se, float* tx, const float* x, const int32_t* t, const float* mx, int64_t N, int64_t V,
                    int64_t va, int64_t v0, float it) override {
    f("shard_sumexp", "se", se, N), opt("shard_sumexp", "tx", tx, N), f("shard_sumexp", "x", x, N * V);
    host("shard_sumexp", "targets", t), f("shard_sumexp", "mx", mx, N);
    b_->shard_sumexp(se, tx, x, t, mx, N, V, va, v0, it);
  }
  void shard_cross_entropy(double* l, float* d, const float* x, const int32_t* t, const float* mx, const float* se,
                           const float* tx, int64_t N, int64_t V, int64_t va, int64_t v0, float sc) override {
    dev("shard_cross_entropy", "loss", l, 8), opt("shard_cross_entropy", "dlogits", d, N * V);
    f("shard_cross_entropy", "x", x, N * V), host("shard_cross_entropy", "targets", t);
    f("shard_cross_entropy", "mx", mx, N), f("shard_cross_entropy", "se", se, N), f("shard_cross_entropy", "tx", tx, N);
    b_->shard_cross_entropy(l, d, x, t, mx, se, tx, N, V, va, v0, sc);
  }
  void shard_kl(float* kl, float* d, const float* s, const float* t, const int32_t* tg, const float* ms, const float* ss,
                const float* mt, const float* st, int64_t N, int64_t V, int64_t va, float T, float sc) override {
    f("shard_kl", "kl", kl, N), opt("shard_kl", "dstudent", d, N * V), f("shard_kl", "student", s, N * V);
    f("shard_kl", "teacher", t, N * V), host("shard_kl", "targets", tg), f("shard_kl", "mx_s", ms, N);
    f("shard_kl", "se_s", ss, N), f("shard_kl", "mx_t", mt, N), f("shard_kl", "se_t", st, N);
    b_->shard_kl(kl, d, s, t, tg, ms, ss, mt, st, N, V, va, T, sc);
  }
  void masked_row_sum(double* o, const float* r, const int32_t* t, int64_t N) override {
    dev("masked_row_sum", "out", o, 8), f("masked_row_sum", "rows", r, N), host("masked_row_sum", "targets", t);
    b_->masked_row_sum(o, r, t, N);
  }
  void adamw(float* p, const float* g, float* m, float* v, size_t n, float lr, float b1, float b2, float e, float wd,
             int64_t t, float gs, void* p16) override {
    f("adamw", "p", p, n), f("adamw", "g", g, n), f("adamw", "m", m, n), f("adamw", "v", v, n);
    if (p16) {  // written, never read: filled with bf16 NaN first, so a copy left unwritten shows as stale
      dev("adamw", "p16", p16, n * 2);
      std::fill_n(static_cast<uint16_t*>(p16), n, uint16_t(0x7fc0));
      ++adamw_copies_;
    }
    b_->adamw(p, g, m, v, n, lr, b1, b2, e, wd, t, gs, p16);
  }
  void set_threads(int t) override { b_->set_threads(t); }
  int threads() const override { return b_->threads(); }

 private:
  // The sync: every held source unchanged, then all of them free to go.
  void check_held() {
    std::lock_guard lock(mu_);
    for (const auto& [src, bytes] : held_)
      if (std::memcmp(src, bytes.data(), bytes.size()) != 0)
        throw std::logic_error("copy_from_host_held: the source of a held upload (" + std::to_string(bytes.size()) +
                               " bytes) changed before the backend's sync: its owner let it go too early");
    held_uploads_ += int64_t(held_.size());
    held_.clear();
    ++syncs_;
  }
  void* track(void* p, size_t bytes) {
    std::lock_guard lock(mu_);
    blocks_[static_cast<const char*>(p)] = bytes;
    return p;
  }
  // The block holding p, or blocks_.end().
  std::map<const char*, size_t>::const_iterator block_of(const void* p) const {
    const char* c = static_cast<const char*>(p);
    auto it = blocks_.upper_bound(c);
    if (it == blocks_.begin()) return blocks_.end();
    --it;
    return c < it->first + it->second ? it : blocks_.end();
  }
  // [p, p + bytes) inside one block of backend memory (nothing to check for an empty extent).
  void dev(const char* op, const char* arg, const void* p, size_t bytes) const {
    if (bytes == 0) return;
    std::lock_guard lock(mu_);
    const auto it = block_of(p);
    if (it == blocks_.end())
      throw std::logic_error(std::string(op) + ": '" + arg + "' is not backend memory (a host pointer?)");
    if (static_cast<const char*>(p) + bytes > it->first + it->second)
      throw std::logic_error(std::string(op) + ": '" + arg + "' runs past the end of its backend buffer");
  }
  void f(const char* op, const char* arg, const void* p, int64_t floats) const { dev(op, arg, p, size_t(floats) * 4); }
  void f(const char* op, const char* arg, const void* p, size_t floats) const { dev(op, arg, p, floats * 4); }
  void opt(const char* op, const char* arg, const void* p, int64_t floats) const {
    if (p) f(op, arg, p, floats);
  }
  // A gradient output; one the op overwrites is filled with NaN first, so an
  // op that reads it after all (or a caller that relies on what it held)
  // shows NaN in the results.
  void grad(const char* op, const char* arg, Grad g, int64_t floats) {
    opt(op, arg, g.p, floats);
    if (!g.p || g.add) return;
    std::fill_n(g.p, floats, std::numeric_limits<float>::quiet_NaN());
    ++overwrites_;
  }
  // The same for an activation op's gradient, and its bf16 copy (GradOut):
  // backend memory, filled with bf16 NaN first; alone only where copies suffice.
  void grad(const char* op, const char* arg, GradOut g, int64_t floats) {
    grad(op, arg, Grad(g), floats);
    bf16_out(op, arg, g.p, g.bf16, floats);
  }
  // An activation output (Out): its fp32 values and/or its bf16 copy, as above.
  void out(const char* op, const char* arg, Out o, int64_t floats) {
    opt(op, arg, o.f32, floats);
    if (!o.f32 && !o.bf16) throw std::logic_error(std::string(op) + ": '" + arg + "' has neither fp32 nor bf16");
    bf16_out(op, arg, o.f32, o.bf16, floats);
  }
  void bf16_out(const char* op, const char* arg, const float* f32, void* b16, int64_t n) {
    if (!b16) return;
    if (!f32 && !bf16_alone_)
      throw std::logic_error(std::string(op) + ": '" + arg + "' asked in bf16 alone of a backend whose copies do not suffice");
    dev(op, (std::string(arg) + ".bf16").c_str(), b16, size_t(n) * 2);
    std::fill_n(static_cast<uint16_t*>(b16), n, uint16_t(0x7fc0));
    ++bf16_outputs_;
  }
  // A linear operand's values to compute from: its fp32 ones (its copy, when
  // given, checked current) — or, made with bf16_alone, their bf16 rounding
  // as a bf16 GEMM reads them (the copy, which may then come alone, or the
  // fp32 values rounded), widened into wide_[slot].
  const float* operand(const char* op, const char* arg, Operand x, int64_t n, int slot) {
    if (x.f32) {
      f(op, arg, x.f32, n);
      copy16(op, arg, x, n);
      if (!bf16_alone_) return x.f32;
    } else {
      alone(op, arg, x, n);
      ++bf16_alone_uses_;
    }
    wide_[slot].resize(size_t(n));
    const auto* c = static_cast<const uint16_t*>(x.bf16);
    for (int64_t k = 0; k < n; ++k) wide_[slot][size_t(k)] = bf16_to_float(c ? c[k] : float_to_bf16(x.f32[k]));
    return wide_[slot].data();
  }
  void qkv(const char* op, Operand q, Operand k, Operand v, int64_t nq, int64_t nkv) {
    input(op, "q", q, nq), input(op, "k", k, nkv), input(op, "v", v, nkv);
  }
  // A non-linear op's Operand input: fp32 (its copy, when given, checked
  // current), or — made with bf16_alone — its copy alone, passed on to the
  // CPU backend, which computes from it widened.
  void input(const char* op, const char* arg, Operand x, int64_t n) {
    if (x.f32) return f(op, arg, x.f32, n), copy16(op, arg, x, n);
    alone(op, arg, x, n);
    ++bf16_alone_inputs_;
  }
  // An operand with no fp32 values: its copy alone, only where the copies
  // suffice (bf16_alone), in backend memory.
  void alone(const char* op, const char* arg, Operand x, int64_t n) {
    if (!x.bf16) throw std::logic_error(std::string(op) + ": '" + arg + "' has neither fp32 nor bf16");
    if (!bf16_alone_)
      throw std::logic_error(std::string(op) + ": '" + arg +
                             "' given in bf16 alone to a backend whose copies do not suffice");
    dev(op, (std::string(arg) + ".bf16").c_str(), x.bf16, size_t(n) * 2);
  }
  // An operand's bf16 copy, when given: backend memory, each element x.f32 rounded.
  void copy16(const char* op, const char* arg, Operand x, int64_t n) {
    if (!x.bf16) return;
    dev(op, (std::string(arg) + ".bf16").c_str(), x.bf16, size_t(n) * 2);
    const auto* c = static_cast<const uint16_t*>(x.bf16);
    for (int64_t k = 0; k < n; ++k)
      if (c[k] != float_to_bf16(x.f32[k]))
        throw std::logic_error(std::string(op) + ": the bf16 copy of '" + arg + "' is stale (element " +
                               std::to_string(k) + ")");
    ++bf16_copy_uses_;
  }
  // Host memory: not inside any block of this backend.
  void host(const char* op, const char* arg, const void* p) const {
    if (!p) return;
    std::lock_guard lock(mu_);
    if (block_of(p) != blocks_.end())
      throw std::logic_error(std::string(op) + ": '" + arg + "' points into backend memory, where host memory is due");
  }

  std::unique_ptr<Backend> b_;
  size_t device_memory_ = size_t(1) << 30;
  mutable std::mutex mu_;  // the activation pool may release from another thread
  std::map<const char*, size_t> blocks_;  // base -> bytes
  int64_t bf16_copy_uses_ = 0, converts_ = 0, overwrites_ = 0, adamw_copies_ = 0, bf16_outputs_ = 0,
          bf16_alone_uses_ = 0, bf16_alone_inputs_ = 0;
  bool bf16_alone_ = false;
  std::vector<float> wide_[3];  // operand(): inp, w, dout widened from their copies
  // copy_from_host_held's pinned sources since the last sync: where, and their bytes then
  std::vector<std::pair<const char*, std::string>> held_;
  std::atomic<uint64_t> syncs_{0};
  int64_t held_uploads_ = 0;
  std::atomic<int64_t> waits_{0};
};

}  // namespace maestro::test_support
