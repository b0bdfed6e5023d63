// Collectives over the local transport: the data-parallel gradient
// all-reduce and the squared norm the global clip needs. Both reduce in a
// fixed order (replica 0, 1, 2, ...; element order), never in arrival
// order, so a run's result does not depend on which replica finished first.
#pragma once

#include <vector>

#include "transport/transport.h"

namespace maestro {

// Elementwise sum of same-shaped tensors, in the order given. With one
// input it returns that input's handle (no copy).         [shape of inputs]
TensorRef sum_in_order(Transport& transport, const std::vector<TensorRef>& parts);

// Sum of squares of every element, accumulated in double.
double sum_of_squares(const TensorRef& t);

}  // namespace maestro
