// The device probes behind `backend = "auto"` and `transport = "auto"`
// agree with what the kernel exposes on this machine, never crash when there
// is nothing to find, and a build without the CUDA toolkit or libibverbs
// (MAESTRO_TEST_HAVE_CUDA / _RDMA = 0) does not pretend to know: the GPU
// count is "unknown", not 0, on a GPU host.
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <optional>
#include <regex>
#include <vector>

#include "gpu/device_query.h"
#include "rdma/devices.h"

namespace fs = std::filesystem;

namespace {
// /dev/nvidia0, /dev/nvidia1, ...: one per GPU the driver exposes.
int nvidia_device_nodes() {
  int n = 0;
  if (!fs::exists("/dev")) return 0;
  for (const auto& e : fs::directory_iterator("/dev"))
    if (std::regex_match(e.path().filename().string(), std::regex("nvidia[0-9]+"))) ++n;
  return n;
}

size_t infiniband_devices() {
  if (!fs::exists("/sys/class/infiniband")) return 0;
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/sys/class/infiniband")) ++n;
  return n;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(device_detection)

BOOST_AUTO_TEST_CASE(cuda_device_count_matches_dev_nodes) {
  const std::optional<int> count = maestro::cuda_device_count();
  BOOST_TEST(count.has_value() == bool(MAESTRO_TEST_HAVE_CUDA));
  if (count) BOOST_TEST(*count == nvidia_device_nodes());
  BOOST_TEST((maestro::cuda_device_count() == count));  // a second call after a failed one
}

// Pinning host memory works exactly where a device does, and a refusal
// leaves no CUDA error behind for the next caller.
BOOST_AUTO_TEST_CASE(cuda_pin_host_where_a_device_is) {
  std::vector<char> memory(1 << 20);
  const bool device = maestro::cuda_device_count().value_or(0) > 0;
  const bool pinned = maestro::cuda_pin_host(memory.data(), memory.size());
  BOOST_TEST(pinned == device);
  if (pinned) {
    BOOST_TEST(!maestro::cuda_pin_host(memory.data(), memory.size()));  // already registered: refused, not thrown
    maestro::cuda_unpin_host(memory.data());
  }
  maestro::cuda_unpin_host(memory.data());  // not pinned (any more): ignored
  BOOST_TEST((maestro::cuda_device_count() == maestro::cuda_device_count()));
  BOOST_TEST(maestro::cuda_device_count().value_or(0) == (device ? nvidia_device_nodes() : 0));
}

BOOST_AUTO_TEST_CASE(rdma_device_names_match_sysfs) {
  const auto names = maestro::rdma_device_names();
  if (MAESTRO_TEST_HAVE_RDMA) BOOST_TEST(names.size() == infiniband_devices());
  else BOOST_TEST(names.empty());
  for (const auto& name : names) BOOST_TEST(fs::exists("/sys/class/infiniband/" + name));
}

BOOST_AUTO_TEST_SUITE_END()
