// The Backend ops that not every backend has (backend.h): by default they
// refuse with an error naming the backend, never computing something else.
#include "nn/backend.h"

#include <stdexcept>
#include <string>

namespace maestro {

namespace {

[[noreturn]] void missing(const Backend& b, const char* op) {
  throw std::logic_error(std::string("the ") + b.name() + " backend has no " + op +
                         " (vocabulary-parallel losses for tensor parallelism)");
}

}  // namespace

void Backend::shard_row_max(float*, const float*, int64_t, int64_t, int64_t, float) { missing(*this, "shard_row_max"); }
void Backend::max_of_parts(float*, const float*, int64_t, int64_t) { missing(*this, "max_of_parts"); }
void Backend::shard_sumexp(float*, float*, const float*, const int32_t*, const float*, int64_t, int64_t, int64_t,
                           int64_t, float) {
  missing(*this, "shard_sumexp");
}
void Backend::shard_cross_entropy(double*, float*, const float*, const int32_t*, const float*, const float*,
                                  const float*, int64_t, int64_t, int64_t, int64_t, float) {
  missing(*this, "shard_cross_entropy");
}
void Backend::shard_kl(float*, float*, const float*, const float*, const int32_t*, const float*, const float*,
                       const float*, const float*, int64_t, int64_t, int64_t, float, float) {
  missing(*this, "shard_kl");
}
void Backend::masked_row_sum(double*, const float*, const int32_t*, int64_t) { missing(*this, "masked_row_sum"); }

}  // namespace maestro
