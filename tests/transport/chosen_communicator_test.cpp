// ChosenCommunicator (transport/chosen_communicator.h): one of its
// candidates once chosen, an error before, abort reaching every candidate.
#include <boost/test/unit_test.hpp>

#include <thread>

#include "transport/chosen_communicator.h"

using namespace maestro;

BOOST_AUTO_TEST_SUITE(chosen_communicator)

BOOST_AUTO_TEST_CASE(collectives_go_to_the_chosen_candidate) {
  auto first = make_local_group(2), second = make_local_group(2);
  ChosenCommunicator r0({first[0], second[0]}), r1({first[1], second[1]});
  BOOST_TEST(std::string(r0.name()) == "unchosen");
  BOOST_TEST(r1.rank() == 1);
  BOOST_TEST(r1.size() == 2);
  float x = 1;
  BOOST_CHECK_THROW(r0.all_reduce(&x, 1), CollectiveError);
  r0.choose(1);
  r1.choose(1);
  BOOST_TEST((r0.chosen() == second[0]));
  std::vector<float> a{1, 2}, b{3, 4};
  std::thread t([&] { r1.all_reduce(b.data(), b.size()); });
  r0.all_reduce(a.data(), a.size());
  t.join();
  BOOST_TEST((a == std::vector<float>{4, 6}));
  BOOST_TEST((b == a));
  BOOST_CHECK_THROW(r0.choose(2), std::out_of_range);
}

BOOST_AUTO_TEST_CASE(abort_reaches_every_candidate) {
  auto first = make_local_group(2), second = make_local_group(2);
  ChosenCommunicator r0({first[0], second[0]});
  r0.choose(0);
  r0.abort("the run ended");
  float x = 1;
  BOOST_CHECK_THROW(first[1]->all_reduce(&x, 1), CollectiveError);   // the chosen group's other rank
  BOOST_CHECK_THROW(second[1]->all_reduce(&x, 1), CollectiveError);  // and the one left
}

BOOST_AUTO_TEST_CASE(candidates_must_be_one_rank) {
  auto two = make_local_group(2), three = make_local_group(3);
  BOOST_CHECK_THROW(ChosenCommunicator({two[0], three[0]}), std::invalid_argument);
  BOOST_CHECK_THROW(ChosenCommunicator({two[0], two[1]}), std::invalid_argument);
  BOOST_CHECK_THROW(ChosenCommunicator(std::vector<std::shared_ptr<Communicator>>{}), std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()
