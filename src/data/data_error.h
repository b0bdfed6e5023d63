// DataError: bad data input (exit status 2); what() names the place,
// "manifest:line: file: message" or "file: message".
#pragma once

#include <stdexcept>

namespace maestro {

struct DataError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace maestro
