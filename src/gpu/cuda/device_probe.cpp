// CUDA device measurements (device_probe.h).
#include "gpu/cuda/device_probe.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "gpu/cuda/cuda_check.h"

namespace maestro {

namespace {

// Milliseconds of `reps` runs of f on `st` after 3 warm-ups.
template <class F>
float time_ms(cudaStream_t st, int reps, F&& f) {
  for (int i = 0; i < 3; ++i) f();
  cudaEvent_t e0, e1;
  MAESTRO_CUDA_CHECK(cudaEventCreate(&e0));
  MAESTRO_CUDA_CHECK(cudaEventCreate(&e1));
  MAESTRO_CUDA_CHECK(cudaEventRecord(e0, st));
  for (int i = 0; i < reps; ++i) f();
  MAESTRO_CUDA_CHECK(cudaEventRecord(e1, st));
  MAESTRO_CUDA_CHECK(cudaEventSynchronize(e1));
  float ms = 0;
  MAESTRO_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return ms;
}

}  // namespace

std::vector<GemmRate> measure_gemm_rates(int device, bool bf16) {
  MAESTRO_CUDA_CHECK(cudaSetDevice(device));
  cublasLtHandle_t lt;
  MAESTRO_CUBLAS_CHECK(cublasLtCreate(&lt));
  const size_t ws_bytes = size_t(32) << 20;
  void* ws;
  MAESTRO_CUDA_CHECK(cudaMalloc(&ws, ws_bytes));
  cudaStream_t st;
  MAESTRO_CUDA_CHECK(cudaStreamCreate(&st));
  const cudaDataType ab = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const size_t ab_size = bf16 ? 2 : 4;
  const int64_t sizes[][3] = {{2048, 2048, 2048}, {4096, 4096, 4096}, {8192, 8192, 8192},
                              {16384, 5504, 2048}, {16384, 2048, 5504}, {16384, 6144, 2048}};
  std::vector<GemmRate> rates;
  for (const auto& s : sizes) {
    const int64_t M = s[0], N = s[1], K = s[2];
    void *A, *B, *C;
    MAESTRO_CUDA_CHECK(cudaMalloc(&A, size_t(M * K) * ab_size));
    MAESTRO_CUDA_CHECK(cudaMalloc(&B, size_t(N * K) * ab_size));
    MAESTRO_CUDA_CHECK(cudaMalloc(&C, size_t(M * N) * 4));
    MAESTRO_CUDA_CHECK(cudaMemset(A, 0x3c, size_t(M * K) * ab_size));  // small finite values in either type
    MAESTRO_CUDA_CHECK(cudaMemset(B, 0x3c, size_t(N * K) * ab_size));
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    MAESTRO_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t T = CUBLAS_OP_T, Nop = CUBLAS_OP_N;
    MAESTRO_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &T, sizeof(T)));
    MAESTRO_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &Nop, sizeof(Nop)));
    MAESTRO_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, ab, K, N, K));  // B[N,K] row-major
    MAESTRO_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, ab, K, M, K));  // A[M,K] row-major
    MAESTRO_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, N, M, N));
    cublasLtMatmulPreference_t pref;
    MAESTRO_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    MAESTRO_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                              sizeof(ws_bytes)));
    cublasLtMatmulHeuristicResult_t h{};
    int found = 0;
    MAESTRO_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 1, &h, &found));
    if (found == 0) throw CudaError("cuBLASLt: no algorithm for the GEMM rate probe");
    const float alpha = 1, beta = 0;
    const int reps = 20;
    const float ms = time_ms(st, reps, [&] {
      MAESTRO_CUBLAS_CHECK(cublasLtMatmul(lt, desc, &alpha, B, la, A, lb, &beta, C, lc, C, lc, &h.algo, ws, ws_bytes, st));
    });
    rates.push_back({M, N, K, 2.0 * double(M) * double(N) * double(K) * reps / (double(ms) / 1e3)});
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(desc);
    MAESTRO_CUDA_CHECK(cudaFree(A));
    MAESTRO_CUDA_CHECK(cudaFree(B));
    MAESTRO_CUDA_CHECK(cudaFree(C));
  }
  cudaStreamDestroy(st);
  cudaFree(ws);
  cublasLtDestroy(lt);
  return rates;
}

double measure_copy_bandwidth(int device) {
  MAESTRO_CUDA_CHECK(cudaSetDevice(device));
  const size_t bytes = size_t(1) << 30;
  void *a, *b;
  MAESTRO_CUDA_CHECK(cudaMalloc(&a, bytes));
  MAESTRO_CUDA_CHECK(cudaMalloc(&b, bytes));
  cudaStream_t st;
  MAESTRO_CUDA_CHECK(cudaStreamCreate(&st));
  const int reps = 10;
  const float ms = time_ms(st, reps, [&] { MAESTRO_CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, st)); });
  cudaStreamDestroy(st);
  MAESTRO_CUDA_CHECK(cudaFree(a));
  MAESTRO_CUDA_CHECK(cudaFree(b));
  return 2.0 * double(bytes) * reps / (double(ms) / 1e3);
}

int64_t device_memory_bytes(int device) {
  cudaDeviceProp p{};
  MAESTRO_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  return int64_t(p.totalGlobalMem);
}

std::string device_name(int device) {
  cudaDeviceProp p{};
  MAESTRO_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  return p.name;
}

}  // namespace maestro
