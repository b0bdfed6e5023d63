// Runs a program to completion and captures what it wrote: the e2e tests'
// one way of calling maestro-run (and dot). stdout and stderr go to temporary
// files, so a chatty child can never block on a full pipe.
#pragma once

#include <string>
#include <vector>

namespace maestro::e2e {

struct ProcessResult {
  int status = -1;  // exit status; 128 + signal when killed by one
  std::string out, err;
  std::string first_err_line() const { return err.substr(0, err.find('\n')); }
};

ProcessResult run_process(const std::vector<std::string>& argv);

// The maestro-run binary under test: $MAESTRO_RUN, else the one this build made.
std::string maestro_run_path();
// maestro-run with these arguments.
ProcessResult maestro_run(const std::vector<std::string>& args);
// The path of `name` on PATH, "" when absent.
std::string find_on_path(const std::string& name);

}  // namespace maestro::e2e
