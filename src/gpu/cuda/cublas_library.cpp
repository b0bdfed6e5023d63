// cuBLAS(Lt) loaded on first use (cublas_library.h): the loader, and the
// entry points the backend calls, each forwarding to the loaded library's
// symbol of the same name (found with dlsym on that library's handle, so a
// forwarder never finds itself).
#include "gpu/cuda/cublas_library.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <mutex>
#include <string>
#include <string_view>

#include "gpu/cuda/cuda_check.h"

namespace maestro {

namespace {

struct Loaded {
  void* cublas_lt = nullptr;  // libcublasLt.so.<major>
  void* cublas = nullptr;     // libcublas.so.<major> (needs cublasLt)
};

std::mutex g_mu;
Loaded g_loaded;  // set once under g_mu, never unloaded

// dlopen by soname (the loader's search path: RUNPATH, LD_LIBRARY_PATH,
// ld.so.conf), then from the toolkit's library folder this was built with.
void* open_library(const char* name) {
  const std::string soname = fmt::format("lib{}.so.{}", name, CUBLAS_VER_MAJOR);
  if (void* h = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
  const std::string by_name = dlerror();
  const std::string path = fmt::format("{}/{}", MAESTRO_CUDA_LIBRARY_DIR, soname);
  if (void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
  throw CudaError(fmt::format("the CUDA backend cannot load {}: {}; nor {}: {}", soname, by_name, path, dlerror()));
}

// The library's own definition of `symbol` (cublasLt* from cuBLASLt, the
// rest from cuBLAS).
void* lookup(const char* symbol) {
  load_cublas();
  const bool lt = std::string_view(symbol).starts_with("cublasLt");
  void* f = dlsym(lt ? g_loaded.cublas_lt : g_loaded.cublas, symbol);
  if (!f)
    throw CudaError(fmt::format("lib{}.so.{} has no {} (a cuBLAS older than this build's headers?)",
                                lt ? "cublasLt" : "cublas", CUBLAS_VER_MAJOR, symbol));
  return f;
}

// The loaded definition of the forwarder Self, resolved on its first call.
template <auto Self>
auto entry(const char* symbol) {
  using Fn = decltype(Self);
  static const Fn f = [symbol] {
    const auto found = reinterpret_cast<Fn>(lookup(symbol));
    if (found == Self) throw CudaError(fmt::format("{} resolved to its own forwarder", symbol));
    return found;
  }();
  return f;
}

}  // namespace

void load_cublas() {
  std::lock_guard lock(g_mu);
  if (g_loaded.cublas) return;
  Loaded l;
  l.cublas_lt = open_library("cublasLt");
  l.cublas = open_library("cublas");
  g_loaded = l;
}

bool cublas_loaded() {
  std::lock_guard lock(g_mu);
  return g_loaded.cublas != nullptr;
}

std::string cublas_symbol_origin(const char* symbol) {
  if (!cublas_loaded()) return "";
  Dl_info info{};
  if (!dladdr(lookup(symbol), &info) || !info.dli_fname) return "";
  return info.dli_fname;
}

}  // namespace maestro

using maestro::entry;

// The forwarders: every cuBLAS(Lt) function maestro_cuda calls (cublas_v2.h
// maps cublasCreate to cublasCreate_v2 and so on). A call of one not listed
// here fails to link, since nothing links libcublas.
extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) { return entry<&cublasCreate_v2>("cublasCreate_v2")(handle); }

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) { return entry<&cublasDestroy_v2>("cublasDestroy_v2")(handle); }

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  return entry<&cublasSetStream_v2>("cublasSetStream_v2")(handle, stream);
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  return entry<&cublasSetMathMode>("cublasSetMathMode")(handle, mode);
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, size_t bytes) {
  return entry<&cublasSetWorkspace_v2>("cublasSetWorkspace_v2")(handle, workspace, bytes);
}

const char* cublasGetStatusString(cublasStatus_t status) {
  return entry<&cublasGetStatusString>("cublasGetStatusString")(status);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long int strideA, const void* B, cudaDataType Btype, int ldb,
                                          long long int strideB, const void* beta, void* C, cudaDataType Ctype, int ldc,
                                          long long int strideC, int batchCount, cublasComputeType_t computeType,
                                          cublasGemmAlgo_t algo) {
  // cublas_api.h overloads this name for C++ (an inline taking the legacy
  // compute-type enum): name the C function by its type
  constexpr cublasStatus_t (*self)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                   const void*, cudaDataType, int, long long int, const void*, cudaDataType, int,
                                   long long int, const void*, void*, cudaDataType, int, long long int, int,
                                   cublasComputeType_t, cublasGemmAlgo_t) = &cublasGemmStridedBatchedEx;
  return entry<self>("cublasGemmStridedBatchedEx")(
      handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb, strideB, beta, C, Ctype, ldc,
      strideC, batchCount, computeType, algo);
}

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) { return entry<&cublasLtCreate>("cublasLtCreate")(handle); }

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) { return entry<&cublasLtDestroy>("cublasLtDestroy")(handle); }

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc,
                              const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspaceBytes, cudaStream_t stream) {
  return entry<&cublasLtMatmul>("cublasLtMatmul")(handle, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc,
                                                   algo, workspace, workspaceBytes, stream);
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* returned) {
  return entry<&cublasLtMatmulAlgoGetHeuristic>("cublasLtMatmulAlgoGetHeuristic")(
      handle, desc, Adesc, Bdesc, Cdesc, Ddesc, preference, requested, results, returned);
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  return entry<&cublasLtMatmulDescCreate>("cublasLtMatmulDescCreate")(desc, compute, scale);
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  return entry<&cublasLtMatmulDescDestroy>("cublasLtMatmulDescDestroy")(desc);
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t bytes) {
  return entry<&cublasLtMatmulDescSetAttribute>("cublasLtMatmulDescSetAttribute")(desc, attr, buf, bytes);
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  return entry<&cublasLtMatmulPreferenceCreate>("cublasLtMatmulPreferenceCreate")(pref);
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  return entry<&cublasLtMatmulPreferenceDestroy>("cublasLtMatmulPreferenceDestroy")(pref);
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t bytes) {
  return entry<&cublasLtMatmulPreferenceSetAttribute>("cublasLtMatmulPreferenceSetAttribute")(pref, attr, buf, bytes);
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  return entry<&cublasLtMatrixLayoutCreate>("cublasLtMatrixLayoutCreate")(layout, type, rows, cols, ld);
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  return entry<&cublasLtMatrixLayoutDestroy>("cublasLtMatrixLayoutDestroy")(layout);
}

}  // extern "C"
