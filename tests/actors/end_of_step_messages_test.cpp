// The end-of-step messages (ReduceGrads, GradsReduced, ApplyGrads, Applied)
// and the transport's TensorDescriptor are serialisable: each survives a
// round trip through CAF's binary serializer field for field, so a
// section's replicas can live in other processes.
#include <boost/test/unit_test.hpp>

#include <caf/all.hpp>

#include "actors/messages.h"
#include "transport/transport.h"

using namespace maestro;

namespace {

template <class T>
T round_trip(caf::actor_system& sys, T x) {
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  auto err = sink(x);
  BOOST_TEST_REQUIRE(!err, caf::to_string(err));
  T y;
  caf::binary_deserializer source{sys, buf};
  err = source(y);
  BOOST_TEST_REQUIRE(!err, caf::to_string(err));
  return y;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(end_of_step_messages)

BOOST_AUTO_TEST_CASE(round_trip_through_the_binary_serializer) {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  BOOST_TEST(round_trip(sys, ReduceGrads{41}).step == 41);
  const GradsReduced g = round_trip(sys, GradsReduced{2, 1, 3, 0.1 + 0.2, {{5, 1.25}, {9, -3e-300}}, "boom"});
  BOOST_TEST(g.section == 2);
  BOOST_TEST(g.stage == 1);
  BOOST_TEST(g.replica == 3);
  BOOST_TEST(g.grad_sq_norm == 0.1 + 0.2);  // bitwise
  BOOST_TEST_REQUIRE(g.losses.size() == 2u);
  BOOST_TEST(g.losses[1].task == 9);
  BOOST_TEST(g.losses[1].loss == -3e-300);
  BOOST_TEST(g.error == "boom");
  const ApplyGrads a = round_trip(sys, ApplyGrads{7, 0.375, 1e-3});
  BOOST_TEST((a.step == 7 && a.scale == 0.375 && a.lr == 1e-3));
  const Applied d = round_trip(sys, Applied{1, 0, 2, "x"});
  BOOST_TEST((d.section == 1 && d.replica == 2 && d.error == "x"));
  const TensorDescriptor t{17, 3, 4096, 260, DType::BF16, Device::Cuda};
  BOOST_TEST((round_trip(sys, t) == t));
}

BOOST_AUTO_TEST_SUITE_END()
