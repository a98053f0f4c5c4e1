# tests/unit/plan_full_minimax.cmake — the full-size MiniMax-M2 (230B, block fp8) layout,
# header-only, planned at tp 8 x pp 2 with expert parallelism and checked per rank against the
# independent reference (tests/unit/test_plan_full.c; labels unit;frontier).
if(NOT TARGET test_plan_full)
  add_executable(test_plan_full unit/test_plan_full.c common/reference.c)
  target_link_libraries(test_plan_full PRIVATE sl_testlib m)
  target_compile_options(test_plan_full PRIVATE ${SL_WARNINGS})
  target_compile_definitions(test_plan_full PRIVATE _GNU_SOURCE)
endif()
add_test(NAME plan_full_minimax COMMAND test_plan_full minimax_m2_full)
set_tests_properties(plan_full_minimax PROPERTIES LABELS "unit;frontier" TIMEOUT 300 SKIP_RETURN_CODE 77
  FIXTURES_REQUIRED models ENVIRONMENT "${SL_TEST_ENV}")
