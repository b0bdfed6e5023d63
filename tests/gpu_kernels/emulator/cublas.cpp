// The emulator's cuBLAS and cuBLASLt (shim/cublas_v2.h, shim/cublasLt.h):
// column-major GEMMs on the host, fp32 sums in k order, with the checks the
// libraries make of their arguments; and the loader of
// gpu/cuda/cublas_library.h, which has nothing to load here.
#include <cublasLt.h>
#include <cublas_v2.h>

#include <algorithm>
#include <string>
#include <type_traits>

#include "gpu/cuda/cublas_library.h"
#include "nn/dtype.h"

namespace maestro {
void load_cublas() {}
bool cublas_loaded() { return true; }
std::string cublas_symbol_origin(const char*) { return "the emulator (tests/gpu_kernels/emulator/cublas.cpp)"; }
}  // namespace maestro

struct cublasContext {};
struct cublasLtContext {};
struct cublasLtMatrixLayoutOpaque {
  cudaDataType type;
  uint64_t rows, cols;
  int64_t ld;
};
struct cublasLtMatmulDescOpaque {
  cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
};
struct cublasLtMatmulPreferenceOpaque {
  uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D: the library's defaults
};

namespace {

float element(const void* p, cudaDataType type, int64_t i) {
  return type == CUDA_R_16BF ? maestro::bf16_to_float(static_cast<const uint16_t*>(p)[i])
                             : static_cast<const float*>(p)[i];
}
bool known(cudaDataType t) { return t == CUDA_R_32F || t == CUDA_R_16BF; }
uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

// D[m,n] = alpha·op(A)·op(B) + beta·C (+ bias[m]), column-major, in fp32;
// C is not read when beta is 0. C and D are of type cd: a bf16 D gets the
// fp32 result rounded to nearest even, as cuBLASLt's epilogue writes it.
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const void* A, cudaDataType at, int64_t lda,
          const void* B, cudaDataType bt, int64_t ldb, float beta, const void* C, int64_t ldc, void* D, int64_t ldd,
          const float* bias, cudaDataType cd = CUDA_R_32F) {
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < m; ++i) {
      float s = 0;
      for (int64_t p = 0; p < k; ++p)
        s += element(A, at, ta ? p + i * lda : i + p * lda) * element(B, bt, tb ? j + p * ldb : p + j * ldb);
      float d = alpha * s;
      if (beta != 0.0f) d += beta * element(C, cd, i + j * ldc);
      if (bias) d += bias[i];
      if (cd == CUDA_R_16BF) static_cast<uint16_t*>(D)[i + j * ldd] = maestro::float_to_bf16(d);
      else static_cast<float*>(D)[i + j * ldd] = d;
    }
}

// The C API's opaque handles: made with new, given back with delete.
template <class Handle>
cublasStatus_t make(Handle* h) {
  *h = new std::remove_pointer_t<Handle>;
  return CUBLAS_STATUS_SUCCESS;
}
template <class Handle>
cublasStatus_t destroy(Handle h) {
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "unknown cuBLAS status";
}
cublasStatus_t cublasCreate(cublasHandle_t* handle) { return make(handle); }
cublasStatus_t cublasDestroy(cublasHandle_t handle) { return destroy(handle); }
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t) {
  return h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t) {
  return h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}
cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void* w, size_t bytes) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  return bytes && alignment_of(w) < 256 ? CUBLAS_STATUS_INVALID_VALUE : CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb, int m,
                                          int n, int k, const void* alpha, const void* A, cudaDataType at, int lda,
                                          long long sa, const void* B, cudaDataType bt, int ldb, long long sb,
                                          const void* beta, void* C, cudaDataType ct, int ldc, long long sc, int batch,
                                          cublasComputeType_t, cublasGemmAlgo_t) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (m < 0 || n < 0 || k < 0 || batch < 0 || !known(at) || at != bt || ct != CUDA_R_32F)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (lda < std::max(1, transa == CUBLAS_OP_N ? m : k) || ldb < std::max(1, transb == CUBLAS_OP_N ? k : n) ||
      ldc < std::max(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  const float a = *static_cast<const float*>(alpha), b = *static_cast<const float*>(beta);
  const size_t ea = at == CUDA_R_16BF ? 2 : 4;
  for (int i = 0; i < batch; ++i) {
    float* c = static_cast<float*>(C) + i * sc;
    gemm(transa == CUBLAS_OP_T, transb == CUBLAS_OP_T, m, n, k, a, static_cast<const char*>(A) + i * sa * ea, at, lda,
         static_cast<const char*>(B) + i * sb * ea, bt, ldb, b, c, ldc, c, ldc, nullptr);
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) { return make(handle); }
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) { return destroy(handle); }
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  if (!known(type) || ld < int64_t(rows) || ld < 1) return CUBLAS_STATUS_INVALID_VALUE;
  *layout = new cublasLtMatrixLayoutOpaque{type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) { return destroy(layout); }
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType scale) {
  if (compute != CUBLAS_COMPUTE_32F || scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  *desc = new cublasLtMatmulDescOpaque;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) { return destroy(desc); }
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                              const void* value, size_t bytes) {
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB:
      if (bytes != sizeof(cublasOperation_t)) return CUBLAS_STATUS_INVALID_VALUE;
      (attr == CUBLASLT_MATMUL_DESC_TRANSA ? d->ta : d->tb) = *static_cast<const cublasOperation_t*>(value);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      if (bytes != sizeof(cublasLtEpilogue_t)) return CUBLAS_STATUS_INVALID_VALUE;
      d->epilogue = *static_cast<const cublasLtEpilogue_t*>(value);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      if (bytes != sizeof(void*)) return CUBLAS_STATUS_INVALID_VALUE;
      d->bias = *static_cast<const void* const*>(value);
      return CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) { return make(pref); }
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) { return destroy(pref); }
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* value,
                                                    size_t bytes) {
  if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES)
    return bytes == sizeof(uint64_t) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
  if (bytes != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
  p->align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES] = *static_cast<const uint32_t*>(value);
  return CUBLAS_STATUS_SUCCESS;
}

namespace {
// The product's shape from D and op(A): m×k times k×n; NOT_SUPPORTED for a
// layout that does not fit it. The types the backend uses, as the library
// takes them with fp32 compute: A and B alike, C and D alike, fp32 C/D
// from either, bf16 C/D only from bf16 A/B, and no bias epilogue into a
// bf16 D (whose bias type the backend never sets).
bool shapes_fit(const cublasLtMatmulDescOpaque& d, const cublasLtMatrixLayoutOpaque& a,
                const cublasLtMatrixLayoutOpaque& b, const cublasLtMatrixLayoutOpaque& c,
                const cublasLtMatrixLayoutOpaque& dl, uint64_t* k) {
  const uint64_t am = d.ta == CUBLAS_OP_N ? a.rows : a.cols, ak = d.ta == CUBLAS_OP_N ? a.cols : a.rows;
  const uint64_t bk = d.tb == CUBLAS_OP_N ? b.rows : b.cols, bn = d.tb == CUBLAS_OP_N ? b.cols : b.rows;
  *k = ak;
  const bool types = a.type == b.type && c.type == dl.type &&
                     (c.type == CUDA_R_32F || (a.type == CUDA_R_16BF && d.epilogue == CUBLASLT_EPILOGUE_DEFAULT));
  return am == c.rows && bn == c.cols && ak == bk && types && c.rows == dl.rows && c.cols == dl.cols;
}
}  // namespace

// One "algorithm": it remembers the alignments it was chosen for (A, B, C,
// D) and the epilogue.
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                              cublasLtMatrixLayout_t dl, cublasLtMatmulPreference_t p, int requested,
                                              cublasLtMatmulHeuristicResult_t* results, int* found) {
  *found = 0;
  uint64_t k = 0;
  if (!h || requested < 1 || !shapes_fit(*d, *a, *b, *c, *dl, &k)) return CUBLAS_STATUS_INVALID_VALUE;
  results[0] = {};
  for (int i = 0; i < 4; ++i) results[0].algo.data[i] = p->align[i];
  results[0].algo.data[4] = uint64_t(d->epilogue);
  *found = 1;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t a, const void* B, cublasLtMatrixLayout_t b, const void* beta,
                              const void* C, cublasLtMatrixLayout_t c, void* D, cublasLtMatrixLayout_t dl,
                              const cublasLtMatmulAlgo_t* algo, void*, size_t, cudaStream_t) {
  uint64_t k = 0;
  if (!h || !algo || !shapes_fit(*d, *a, *b, *c, *dl, &k)) return CUBLAS_STATUS_INVALID_VALUE;
  // The algorithm must have been chosen for this epilogue and for alignments these pointers have.
  if (algo->data[4] != uint64_t(d->epilogue) || (d->epilogue == CUBLASLT_EPILOGUE_BIAS && !d->bias))
    return CUBLAS_STATUS_INVALID_VALUE;
  const void* ptr[4] = {A, B, C, D};
  for (int i = 0; i < 4; ++i)
    if (alignment_of(ptr[i]) < algo->data[i]) return CUBLAS_STATUS_INVALID_VALUE;
  gemm(d->ta == CUBLAS_OP_T, d->tb == CUBLAS_OP_T, int64_t(c->rows), int64_t(c->cols), int64_t(k),
       *static_cast<const float*>(alpha), A, a->type, a->ld, B, b->type, b->ld, *static_cast<const float*>(beta), C,
       c->ld, D, dl->ld, d->epilogue == CUBLASLT_EPILOGUE_BIAS ? static_cast<const float*>(d->bias) : nullptr, dl->type);
  return CUBLAS_STATUS_SUCCESS;
}
