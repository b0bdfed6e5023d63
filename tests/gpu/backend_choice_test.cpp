// `[runtime] backend` resolved for every kind of build and machine
// (resolve_backend, gpu/backend_factory.h): auto picks cuda exactly when
// the CUDA backend is built and a device is present; cuda without either is
// BackendUnavailable naming why.
#include <boost/test/unit_test.hpp>

#include "gpu/backend_factory.h"

using namespace maestro;

BOOST_AUTO_TEST_SUITE(backend_resolution)

BOOST_AUTO_TEST_CASE(auto_picks_cuda_only_with_the_backend_and_a_device) {
  BOOST_TEST((resolve_backend("auto", true, 2).kind == BackendKind::Cuda));
  BOOST_TEST(resolve_backend("auto", true, 2).reason == "2 CUDA device(s) found");
  BOOST_TEST((resolve_backend("auto", true, 0).kind == BackendKind::Cpu));
  BOOST_TEST((resolve_backend("auto", false, 4).kind == BackendKind::Cpu));
  BOOST_TEST(resolve_backend("auto", false, 4).reason == "4 CUDA device(s) found; this build has no CUDA backend");
  BOOST_TEST((resolve_backend("auto", false, -1).kind == BackendKind::Cpu));
  BOOST_TEST((resolve_backend("cpu", true, 8).kind == BackendKind::Cpu));
}

BOOST_AUTO_TEST_CASE(cuda_needs_the_backend_and_a_device) {
  BOOST_TEST((resolve_backend("cuda", true, 1).kind == BackendKind::Cuda));
  auto refused = [](bool built, int devices, const std::string& why) {
    try {
      resolve_backend("cuda", built, devices);
      BOOST_ERROR("accepted cuda without " << why);
    } catch (const BackendUnavailable& e) {
      BOOST_TEST(std::string(e.what()).find(why) != std::string::npos, e.what());
    }
  };
  refused(true, 0, "no CUDA device found");
  refused(false, 2, "this build has no CUDA backend");
  refused(false, -1, "this build cannot see CUDA devices");
  BOOST_CHECK_THROW(resolve_backend("gpu", true, 1), std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()
