// libFuzzer entry point for the .sect front end: any input must give either a
// Program or diagnostics (rendered, to exercise the caret code), never a
// crash, a hang, or a sanitizer report. The virtual file lives in a temp
// folder, so relative imports in the input resolve (and fail) there.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <sstream>
#include <string>
#include <string_view>

#include "dsl/frontend.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path =
      (std::filesystem::temp_directory_path() / "maestro_fuzz" / "input.sect").string();
  maestro::Diagnostics diags;
  auto program = maestro::load_program_text(std::string_view(reinterpret_cast<const char*>(data), size), path, diags);
  std::ostringstream out;
  diags.render(out);
  if (program.has_value() != diags.ok()) __builtin_trap();  // a Program exactly when there is no error
  return 0;
}
