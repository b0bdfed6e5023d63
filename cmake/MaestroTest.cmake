# maestro_unit_test(<module> LIBS <libs...> [ORACLE] [APART <suites...>]): one
# Boost.Test executable per module built from tests/<module>/*.cpp,
# registered with ctest as `unit.<module>`. Tests run from the source root so
# fixtures resolve.
#
# APART: each named test suite runs as its own ctest, `unit.<module>.<suite>`,
# and `unit.<module>` runs the rest — so that `ctest -j` runs a module's long
# suites side by side (unit.plan under ASan: one 29-minute test before).
#
# ORACLE: the module has test cases labelled "oracle" (checked against the
# PyTorch oracle, tests/oracle/). They run apart as `oracle.<module>` under
# tests/oracle/require_torch.sh, so without torch ctest reports them Skipped
# (exit 77) rather than passed; `unit.<module>` runs every other case.
set(MAESTRO_SKIP_CODE 77)

function(maestro_unit_test module)
  cmake_parse_arguments(ARG "ORACLE" "" "LIBS;APART" ${ARGN})
  if(ARG_ORACLE AND ARG_APART)
    message(FATAL_ERROR "maestro_unit_test(${module}): ORACLE and APART together are not supported")
  endif()
  file(GLOB srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp)
  add_executable(test_${module} ${srcs})
  target_compile_definitions(test_${module} PRIVATE BOOST_TEST_DYN_LINK)
  target_link_libraries(test_${module} PRIVATE ${ARG_LIBS} Boost::unit_test_framework)
  target_include_directories(test_${module} PRIVATE ${PROJECT_SOURCE_DIR}/tests)  # support/
  set(args --log_level=test_suite --report_level=short)
  if(ARG_ORACLE)
    add_test(NAME unit.${module} COMMAND test_${module} ${args} --run_test=!@oracle
             WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
    maestro_oracle_test(oracle.${module} COMMAND $<TARGET_FILE:test_${module}> ${args} --run_test=@oracle)
  elseif(ARG_APART)
    list(JOIN ARG_APART "," apart)
    add_test(NAME unit.${module} COMMAND test_${module} ${args} --run_test=!${apart}
             WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
    foreach(suite IN LISTS ARG_APART)
      add_test(NAME unit.${module}.${suite} COMMAND test_${module} ${args} --run_test=${suite}
               WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
    endforeach()
  else()
    add_test(NAME unit.${module} COMMAND test_${module} ${args} WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  endif()
  if(MAESTRO_UBSAN_SUPPRESSIONS)
    set(tests unit.${module})
    foreach(suite IN LISTS ARG_APART)
      list(APPEND tests unit.${module}.${suite})
    endforeach()
    set_tests_properties(${tests} PROPERTIES ENVIRONMENT "UBSAN_OPTIONS=suppressions=${MAESTRO_UBSAN_SUPPRESSIONS}")
  endif()
endfunction()

# maestro_oracle_test(<name> COMMAND <cmd...>): a ctest that needs the PyTorch
# oracle; Skipped when it cannot run (tests/oracle/require_torch.sh).
function(maestro_oracle_test name)
  cmake_parse_arguments(ARG "" "" "COMMAND" ${ARGN})
  add_test(NAME ${name} COMMAND sh ${PROJECT_SOURCE_DIR}/tests/oracle/require_torch.sh ${ARG_COMMAND}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE ${MAESTRO_SKIP_CODE} LABELS oracle)
endfunction()
