# maestro_unit_test(<module> LIBS <libs...>): one Boost.Test executable per
# module built from tests/<module>/*.cpp, registered with ctest as
# `unit.<module>`. Tests run from the source root so fixtures resolve.
function(maestro_unit_test module)
  cmake_parse_arguments(ARG "" "" "LIBS" ${ARGN})
  file(GLOB srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp)
  add_executable(test_${module} ${srcs})
  target_compile_definitions(test_${module} PRIVATE BOOST_TEST_DYN_LINK)
  target_link_libraries(test_${module} PRIVATE ${ARG_LIBS} Boost::unit_test_framework)
  target_include_directories(test_${module} PRIVATE ${PROJECT_SOURCE_DIR}/tests)  # support/
  add_test(NAME unit.${module} COMMAND test_${module} --log_level=test_suite --report_level=short
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
endfunction()
