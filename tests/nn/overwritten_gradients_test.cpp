// The gradients written by the op that produces them first (nn/backend.h's
// Grad::overwrite) instead of zeroed and accumulated into: the layers'
// scratch gradients, and — SectionModel::zero_grads() only marking them
// unwritten — the weight gradients of the linear layers in a step's first
// micro-batch (model_impl.h's Param). On CheckedBackend, which fills each
// overwritten buffer with NaN before the op, a decoder section's gradients
// over two steps (two micro-batches, then one) come out those of the CPU
// backend with every gradient zeroed up front, so no op reads what it
// overwrites and no later use relies on what was there. The count pins
// where it is used.
#include <boost/test/unit_test.hpp>


#include "cpu/cpu_backend.h"
#include "oracle_harness.h"
#include "support/checked_backend.h"

using namespace maestro;
using namespace maestro::test;

BOOST_AUTO_TEST_SUITE(overwritten_gradients)

BOOST_AUTO_TEST_CASE(decoder_gradients_match_those_of_zeroing_first) {
  const Section sec = make_section("llm", llama(2, 32, 4, 2, 48, 37, 16), Mode::Train, false,
                                   {{LossKind::CrossEntropy, 1.0, 1.0}});
  test_support::CheckedBackend checked(1);
  auto cpu = make_cpu_backend(1);
  std::vector<std::vector<float>> grads;
  const std::vector<int32_t> a = random_tokens(11, 1, 37), c = random_tokens(6, 2, 37), d = random_tokens(9, 3, 37);
  for (Backend* b : {static_cast<Backend*>(&checked), cpu.get()}) {
    const bool eager = b == cpu.get();
    SectionModel m(sec, *b, 3);
    auto pass = [&](std::vector<std::vector<int32_t>> samples) {
      std::vector<SampleInput> in(samples.size());
      for (size_t i = 0; i < samples.size(); ++i) in[i].tokens = samples[i];
      ForwardOutput fw = m.forward(in);
      m.loss(*fw.context, {}, 26);
      m.backward(*fw.context, {});
    };
    auto grads_now = [&] {
      std::vector<float> g(size_t(m.parameter_count()));
      b->copy_to_host(g.data(), m.grads(), g.size() * sizeof(float));
      grads.push_back(std::move(g));
    };
    m.zero_grads();
    if (eager) m.grads();  // zeroes every gradient now: each op then adds
    pass({a, c});
    pass({d});
    grads_now();
    m.zero_grads();
    if (eager) m.grads();
    pass({d, a});
    grads_now();
  }
  // (values compared: a NaN anywhere fails)
  BOOST_TEST((grads[0] == grads[2]));  // first step, two micro-batches
  BOOST_TEST((grads[1] == grads[3]));  // second step
  // Per layer: dact, dgate, dup, dn (MLP), datt, dq, dk, dv, dn (attention)
  // and the head's dnormed in every micro-batch; in a step's first, also the
  // seven linear weights' gradients per layer and the head's.
  const int64_t every = 9 * 2 + 1, first = 7 * 2 + 1;
  BOOST_TEST(checked.overwrites() == 3 * every + 2 * first);
}

BOOST_AUTO_TEST_SUITE_END()
