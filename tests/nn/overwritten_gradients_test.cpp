// The layers' scratch gradients written by the op that produces them first
// (nn/backend.h's Grad::overwrite) instead of zeroed and accumulated into:
// on CheckedBackend, which fills each overwritten buffer with NaN before the
// op, a decoder section's gradients come out bit for bit those of the CPU
// backend (the same fp32 ops), so no op reads what it overwrites and no
// later use relies on what was there. The count pins where it is used.
#include <boost/test/unit_test.hpp>

#include <cstring>

#include "cpu/cpu_backend.h"
#include "oracle_harness.h"
#include "support/checked_backend.h"

using namespace maestro;
using namespace maestro::test;

BOOST_AUTO_TEST_SUITE(overwritten_gradients)

BOOST_AUTO_TEST_CASE(decoder_gradients_match_the_cpu_backend_bit_for_bit) {
  const Section sec = make_section("llm", llama(2, 32, 4, 2, 48, 37, 16), Mode::Train, false,
                                   {{LossKind::CrossEntropy, 1.0, 1.0}});
  test_support::CheckedBackend checked(1);
  auto cpu = make_cpu_backend(1);
  std::vector<std::vector<float>> grads;
  for (Backend* b : {static_cast<Backend*>(&checked), cpu.get()}) {
    SectionModel m(sec, *b, 3);
    m.zero_grads();
    const std::vector<int32_t> a = random_tokens(11, 1, 37), c = random_tokens(6, 2, 37);
    std::vector<SampleInput> in(2);
    in[0].tokens = a, in[1].tokens = c;
    ForwardOutput fw = m.forward(in);
    m.loss(*fw.context, {}, 17);
    m.backward(*fw.context, {});
    std::vector<float> g(size_t(m.parameter_count()));
    b->copy_to_host(g.data(), m.grads(), g.size() * sizeof(float));
    grads.push_back(std::move(g));
  }
  BOOST_TEST(std::memcmp(grads[0].data(), grads[1].data(), grads[0].size() * sizeof(float)) == 0);
  // per layer: dact, dgate, dup, dn (MLP), datt, dn (attention); the head's dnormed
  BOOST_TEST(checked.overwrites() == 6 * 2 + 1);
}

BOOST_AUTO_TEST_SUITE_END()
