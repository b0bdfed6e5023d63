// Checkpoint folders: the atomic commit, `latest`, reading back, and clear
// errors for a folder that can't be written or a damaged state.json.
#include <boost/test/unit_test.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "actors/checkpoint.h"

using namespace maestro;
namespace fs = std::filesystem;

namespace {

std::string fresh_root(const char* name) {
  const fs::path root = fs::temp_directory_path() / fmt::format("maestro-{}-{}", name, ::getpid());
  fs::remove_all(root);
  return root.string();
}

}  // namespace

BOOST_AUTO_TEST_CASE(commit_renames_into_place_and_updates_latest) {
  const std::string root = fresh_root("ckpt-commit");
  CheckpointState s{5, 160, 1, 7, 32, "wavefront", {"llm"}, {3.5, 3.25, 3.0, 2.75, 2.5}};
  std::string tmp_path;
  {
    CheckpointWriter w(root, 5);
    tmp_path = w.section_path("llm");
    std::ofstream(tmp_path) << "weights";
    BOOST_TEST(!fs::exists(root + "/step-00000005"));  // nothing visible before the commit
    BOOST_TEST(w.commit(s) == root + "/step-00000005");
  }
  BOOST_TEST(!fs::exists(tmp_path));
  BOOST_TEST(fs::exists(root + "/step-00000005/llm.safetensors"));
  BOOST_TEST(resolve_checkpoint_dir(root) == root + "/step-00000005");
  const CheckpointState r = read_checkpoint_state(resolve_checkpoint_dir(root));
  BOOST_TEST(r.step == 5);
  BOOST_TEST(r.samples == 160);
  BOOST_TEST(r.data_seed == 7u);
  BOOST_TEST(r.losses == s.losses);  // doubles round-trip exactly through JSON
  fs::remove_all(root);
}

BOOST_AUTO_TEST_CASE(an_abandoned_writer_leaves_nothing) {
  const std::string root = fresh_root("ckpt-abandon");
  {
    CheckpointWriter w(root, 2);
    std::ofstream(w.section_path("vision")) << "partial";
  }  // e.g. a section failed to save
  for (const auto& e : fs::directory_iterator(root)) BOOST_FAIL("left behind: " << e.path());
  BOOST_CHECK_THROW(resolve_checkpoint_dir(root), CheckpointError);
  fs::remove_all(root);
}

BOOST_AUTO_TEST_CASE(errors_are_clear) {
  const std::string file = fresh_root("ckpt-file");
  std::ofstream(file) << "not a folder";
  try {
    CheckpointWriter w(file + "/ckpt", 1);
    BOOST_FAIL("expected a CheckpointError");
  } catch (const CheckpointError& e) {
    BOOST_TEST(std::string(e.what()).find(file) != std::string::npos);
  }
  fs::remove(file);

  const std::string root = fresh_root("ckpt-damaged");
  fs::create_directories(root + "/step-00000001");
  std::ofstream(root + "/step-00000001/state.json") << "{\"format\": \"maestro-checkpoint-1\", \"step\": ";
  BOOST_CHECK_THROW(read_checkpoint_state(root + "/step-00000001"), CheckpointError);
  fs::remove_all(root);
}

BOOST_AUTO_TEST_CASE(write_failures_name_the_path_and_the_reason) {
  const std::string root = fresh_root("ckpt-write-fail");
  CheckpointWriter w(root, 3);
  std::ofstream(w.section_path("llm")) << "weights";
  const std::string state = fs::path(w.section_path("llm")).parent_path().string() + "/state.json";
  fs::create_directory(state);  // state.json cannot be created: EISDIR
  try {
    w.commit(CheckpointState{3, 3, 1, 7, 1, "wavefront", {"llm"}, {1, 1, 1}});
    BOOST_FAIL("expected a CheckpointError");
  } catch (const CheckpointError& e) {
    BOOST_TEST(std::string(e.what()).find(state) != std::string::npos, e.what());
    BOOST_TEST(std::string(e.what()).find("Is a directory") != std::string::npos, e.what());
  }
  fs::remove_all(root);
}

BOOST_AUTO_TEST_CASE(recommitting_a_step_keeps_latest_valid) {
  // Re-writing the step `latest` names swaps the folders atomically.
  const std::string root = fresh_root("ckpt-recommit");
  for (const char* weights : {"old", "new"}) {
    CheckpointWriter w(root, 2);
    std::ofstream(w.section_path("llm")) << weights;
    w.commit(CheckpointState{2, 2, 1, 7, 1, "wavefront", {"llm"}, {1, 1}});
  }
  BOOST_TEST(resolve_checkpoint_dir(root) == root + "/step-00000002");
  std::ifstream in(root + "/step-00000002/llm.safetensors");
  std::string text;
  in >> text;
  BOOST_TEST(text == "new");
  for (const auto& e : fs::directory_iterator(root))
    BOOST_TEST((e.path().filename() == "latest" || e.path().filename() == "step-00000002"), e.path());
  fs::remove_all(root);
}
