# tests/unit/plan_full_dsa.cmake — the full-size GLM-5 (744B) and DeepSeek-V3.2 (671B) layouts,
# header-only, planned at tp 8 x pp 2 with expert parallelism and checked per rank against the
# independent reference (tests/unit/test_plan_full.c; labels unit;frontier).
if(NOT TARGET test_plan_full)
  add_executable(test_plan_full unit/test_plan_full.c common/reference.c)
  target_link_libraries(test_plan_full PRIVATE sl_testlib m)
  target_compile_options(test_plan_full PRIVATE ${SL_WARNINGS})
  target_compile_definitions(test_plan_full PRIVATE _GNU_SOURCE)
endif()
add_test(NAME plan_full_dsa COMMAND test_plan_full glm5_full deepseek_v32_full)
set_tests_properties(plan_full_dsa PROPERTIES LABELS "unit;frontier" TIMEOUT 300 SKIP_RETURN_CODE 77
  FIXTURES_REQUIRED models ENVIRONMENT "${SL_TEST_ENV}")
