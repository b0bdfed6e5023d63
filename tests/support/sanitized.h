// Whether this test binary was built with a sanitizer (CI's ASan+UBSan and
// TSan stages), and the workloads the planner's long sweeps leave to the
// plain build there. Planning InternVL-20B/26B and Omni-Whisper-7B on 64
// H100 is a search over many plans; under ASan it runs about 10x slower, and
// the two sweeps that ran them (unit.plan.simulate_e2e,
// unit.plan.wavefront_vs_sequential) took 2,015 s of CI's 90 minutes on 2 cores. The plain build (`make test`,
// CI's first stage) runs every workload; under a sanitizer the same code
// paths run on every other workload and on these models' other clusters
// (docs/runtime.md, "Checking with ASan").
#pragma once

#include <string_view>

namespace maestro::test {

#if defined(MAESTRO_ASAN) || defined(MAESTRO_TSAN)  // CMakeLists.txt, MAESTRO_SANITIZE
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

// True for a model ("models/x.sect" or "x") on a cluster ("configs/y.toml"
// or "y") whose plan takes longest to search, when sanitized.
inline bool left_to_the_plain_build(std::string_view model, std::string_view cluster) {
  if (!kSanitized || cluster.find("h100x64") == std::string_view::npos) return false;
  for (std::string_view m : {"internvl_20b", "internvl_26b", "omni_whisper_7b"})
    if (model.find(m) != std::string_view::npos) return true;
  return false;
}

}  // namespace maestro::test
