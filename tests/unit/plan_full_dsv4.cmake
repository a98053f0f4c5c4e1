# tests/unit/plan_full_dsv4.cmake — the full-size DeepSeek-V4-Pro layout (1.6T: FP4 experts, block
# fp8), header-only, planned at tp 8 x pp 2 with expert parallelism and checked per rank against
# the independent reference (tests/unit/test_plan_full.c; labels unit;frontier). Flash
# (deepseek_v4_flash_full, 284B) is the same layout with other sizes: `test_plan_full
# deepseek_v4_flash_full` checks it by hand (left out of the suite for its time).
if(NOT TARGET test_plan_full)
  add_executable(test_plan_full unit/test_plan_full.c common/reference.c)
  target_link_libraries(test_plan_full PRIVATE sl_testlib m)
  target_compile_options(test_plan_full PRIVATE ${SL_WARNINGS})
  target_compile_definitions(test_plan_full PRIVATE _GNU_SOURCE)
endif()
add_test(NAME plan_full_dsv4 COMMAND test_plan_full deepseek_v4_pro_full)
set_tests_properties(plan_full_dsv4 PROPERTIES LABELS "unit;frontier" TIMEOUT 300 SKIP_RETURN_CODE 77
  FIXTURES_REQUIRED models ENVIRONMENT "${SL_TEST_ENV}")
