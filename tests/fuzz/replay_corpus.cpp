// Replays a fuzz corpus through a libFuzzer entry point without libFuzzer:
// `replay_X DIR...` feeds every file under each DIR to LLVMFuzzerTestOneInput
// once, so ctest checks the corpus on every build (and under the sanitizers).
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  size_t n = 0;
  for (int a = 1; a < argc; ++a)
    for (const auto& e : std::filesystem::recursive_directory_iterator(argv[a])) {
      if (!e.is_regular_file()) continue;
      std::ifstream in(e.path(), std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(in)), {});
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      ++n;
    }
  std::printf("replayed %zu inputs\n", n);
  return n > 0 ? 0 : 1;
}
