// The interpreter that runs the PyTorch oracle (tests/oracle/): the
// MAESTRO_ORACLE_PYTHON environment variable, else Debian's /usr/bin/python3
// (python3-torch). Oracle test cases carry the Boost.Test label "oracle" and
// run as their own ctest under tests/oracle/require_torch.sh, which reports
// them skipped when this interpreter cannot import torch.
#pragma once

#include <cstdlib>
#include <string>

namespace maestro::test {

inline std::string oracle_python() {
  const char* env = std::getenv("MAESTRO_ORACLE_PYTHON");
  return env && *env ? env : "/usr/bin/python3";
}

}  // namespace maestro::test
