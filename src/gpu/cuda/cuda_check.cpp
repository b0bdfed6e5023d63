// throw_cuda_error (cuda_check.h).
#include "gpu/cuda/cuda_check.h"

#include <fmt/format.h>

namespace maestro {

void throw_cuda_error(const char* what, const char* lib, int code, const char* detail, const char* file, int line) {
  throw CudaError(fmt::format("{}:{}: {} error {} ({}) in {}", file, line, lib, code, detail ? detail : "?", what));
}

}  // namespace maestro
