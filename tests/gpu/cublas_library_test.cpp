// cuBLAS(Lt) loaded on first use (gpu/cuda/cublas_library.h): nothing maps
// it before load_cublas, after it every forwarder reaches the library's own
// function with its arguments and result intact. The calls here are the
// host-side ones that need no GPU. Builds without the CUDA backend have no
// forwarders, and no case.
#include <boost/test/unit_test.hpp>

#if MAESTRO_HAVE_CUDA_BACKEND
#include <cublasLt.h>
#include <cublas_v2.h>

#include <fstream>
#include <sstream>
#include <string>

#include "gpu/cuda/cublas_library.h"

using namespace maestro;

namespace {
// Whether a file whose name contains `name` is mapped into this process.
bool mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::stringstream all;
  all << maps.rdbuf();
  return all.str().find(name) != std::string::npos;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(cublas_library)

BOOST_AUTO_TEST_CASE(loaded_on_first_use_and_forwarded) {
  // No case of this program makes a CUDA backend without a GPU; with one,
  // an earlier case may have loaded cuBLAS already.
  if (!cublas_loaded()) {
    BOOST_TEST(!mapped("libcublas"));
    BOOST_TEST(cublas_symbol_origin("cublasLtMatmul") == "");
  }
  load_cublas();
  load_cublas();  // once
  BOOST_TEST(cublas_loaded());
  BOOST_TEST(mapped("libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR)));
  const std::string lt = cublas_symbol_origin("cublasLtMatmul"), blas = cublas_symbol_origin("cublasCreate_v2");
  BOOST_TEST(lt.find("libcublasLt.so.") != std::string::npos, lt);
  BOOST_TEST(blas.find("libcublas.so.") != std::string::npos, blas);

  // a result through a forwarder
  BOOST_TEST(std::string(cublasGetStatusString(CUBLAS_STATUS_INVALID_VALUE)) ==
             "an unsupported value or parameter was passed to the function");
  // arguments through forwarders: a layout is made from them, and bad ones are refused
  cublasLtMatrixLayout_t layout = nullptr;
  BOOST_TEST(cublasLtMatrixLayoutCreate(&layout, CUDA_R_32F, 3, 5, 3) == CUBLAS_STATUS_SUCCESS);
  BOOST_TEST(layout != nullptr);
  BOOST_TEST(cublasLtMatrixLayoutDestroy(layout) == CUBLAS_STATUS_SUCCESS);
  BOOST_TEST(cublasLtMatrixLayoutCreate(nullptr, CUDA_R_32F, 3, 5, 3) != CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulDesc_t desc = nullptr;
  BOOST_TEST(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
  const cublasOperation_t op = CUBLAS_OP_T;
  BOOST_TEST(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op, sizeof(op)) ==
             CUBLAS_STATUS_SUCCESS);
  BOOST_TEST(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op, 1) != CUBLAS_STATUS_SUCCESS);
  BOOST_TEST(cublasLtMatmulDescDestroy(desc) == CUBLAS_STATUS_SUCCESS);
}

BOOST_AUTO_TEST_SUITE_END()
#endif
