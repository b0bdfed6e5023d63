// The --calibrate probes (cpu/machine_probe.h) on small sizes: they time real
// work (the sgemm's product is checked inside) and report a positive, finite
// throughput.
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "cpu/machine_probe.h"

BOOST_AUTO_TEST_SUITE(machine_probe)

BOOST_AUTO_TEST_CASE(sgemm_and_triad_report_positive_throughput) {
  const double flops = maestro::measure_sgemm_flops(128, 2);
  BOOST_TEST(std::isfinite(flops));
  BOOST_TEST(flops > 1e6);  // any CPU does more than a MFLOP/s
  const double bytes = maestro::measure_triad_bytes_per_s(size_t(1) << 16, 2);
  BOOST_TEST(std::isfinite(bytes));
  BOOST_TEST(bytes > 1e6);
}

BOOST_AUTO_TEST_SUITE_END()
