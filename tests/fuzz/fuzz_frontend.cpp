// libFuzzer entry point for the .sect front end: any input must give either a
// Program or diagnostics (rendered, to exercise the caret code), never a
// crash, a hang, or a sanitizer report. The virtual file lives in a temp
// folder, so relative imports in the input resolve (and fail) there. An
// accepted program's graph counts are computed too, so that a size the
// front end's limits (dsl/limits.h) let through and graph/ cannot count
// (an overflow: std::overflow_error, or UBSan on the unchecked ones) is found.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

#include "dsl/frontend.h"
#include "graph/counts.h"
#include "graph/model_tensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path =
      (std::filesystem::temp_directory_path() / "maestro_fuzz" / "input.sect").string();
  maestro::Diagnostics diags;
  auto program = maestro::load_program_text(std::string_view(reinterpret_cast<const char*>(data), size), path, diags);
  std::ostringstream out;
  diags.render(out);
  if (program.has_value() != diags.ok()) __builtin_trap();  // a Program exactly when there is no error
  if (program)
    for (const maestro::Section& s : program->sections) {
      try {
        (void)maestro::parameter_count(s.model);
      } catch (const std::overflow_error&) {
        __builtin_trap();
      }
      (void)maestro::activation_bytes_per_token(s.model, maestro::Precision::FP32, maestro::ActivationKind::Train);
      (void)maestro::forward_flops(s.model, int64_t(1) << 20);
    }
  return 0;
}
