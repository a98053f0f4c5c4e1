# S3 client tests (label s3): the pure parts in s3_unit (no server), and scenarios against a local
# S3 store — s3rver (npm, installed by scripts/setup into .s3rver/) behind the fault-injecting front
# tests/s3/front.py — driven by tests/s3/test_s3.py, one ctest test per group. Without node,
# s3rver or botocore the scenarios skip (77). No network beyond 127.0.0.1.

add_executable(s3_unit ${CMAKE_CURRENT_LIST_DIR}/s3_unit.c)
target_link_libraries(s3_unit PRIVATE sl_testlib)
target_compile_options(s3_unit PRIVATE ${SL_WARNINGS})
target_compile_definitions(s3_unit PRIVATE _GNU_SOURCE)
add_test(NAME s3_unit COMMAND s3_unit)
set_tests_properties(s3_unit PROPERTIES LABELS "unit;s3" TIMEOUT 60 ENVIRONMENT "${SL_TEST_ENV}")

# One client call per run, its outcome as a JSON line (see s3_driver.c).
add_executable(s3_driver ${CMAKE_CURRENT_LIST_DIR}/s3_driver.c)
target_link_libraries(s3_driver PRIVATE sl_testlib)
target_compile_options(s3_driver PRIVATE ${SL_WARNINGS})
target_compile_definitions(s3_driver PRIVATE _GNU_SOURCE)

# client: listing, reads, settings, addressing, signatures; errors: what the store refuses;
# faults: what breaks during a read; load: s3:// models at 1-4 ranks, byte-exact.
set(SL_S3_GROUPS client errors faults load)
# The Python case of s3_load opens the library with ctypes: in a sanitized build the ASan runtime
# must come first there (and only there: not in node or the front).
set(_sl_s3_env ${SL_TEST_ENV})
if(SL_PY_LIBRARY_ENV)
  string(REPLACE "LD_PRELOAD=" "SL_PY_PRELOAD=" _sl_s3_preload "${SL_PY_LIBRARY_ENV}")
  list(APPEND _sl_s3_env "${_sl_s3_preload}")
endif()
foreach(group ${SL_S3_GROUPS})
  if(Python3_Interpreter_FOUND)
    add_test(NAME s3_${group}
      COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/test_s3.py --driver $<TARGET_FILE:s3_driver> ${group})
  else()
    add_test(NAME s3_${group} COMMAND sh -c "echo 'python3 not found: s3_${group} skipped'; exit 77")
  endif()
  set_tests_properties(s3_${group} PROPERTIES LABELS s3 TIMEOUT 600 SKIP_RETURN_CODE 77 FIXTURES_REQUIRED models
    ENVIRONMENT "${_sl_s3_env}")
endforeach()
set_tests_properties(s3_load PROPERTIES PROCESSORS 4)
