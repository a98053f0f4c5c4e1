# Hub client tests (label hub): pure functions in hub_unit, and scenarios against the local
# fault-injecting Hub server (tests/hub/server.py) driven by tests/hub/test_hub.py, one ctest test
# per scenario group. They need no fixture models and no network beyond 127.0.0.1.

add_executable(hub_unit ${CMAKE_CURRENT_LIST_DIR}/hub_unit.c)
target_link_libraries(hub_unit PRIVATE sl_testlib)
target_compile_options(hub_unit PRIVATE ${SL_WARNINGS})
target_compile_definitions(hub_unit PRIVATE _GNU_SOURCE)
add_test(NAME hub_unit COMMAND hub_unit)
set_tests_properties(hub_unit PROPERTIES LABELS hub TIMEOUT 60 ENVIRONMENT "${SL_TEST_ENV}")

# One resolution per run, result as a JSON line (see hub_driver.c).
add_executable(hub_driver ${CMAKE_CURRENT_LIST_DIR}/hub_driver.c)
target_link_libraries(hub_driver PRIVATE sl_testlib)
target_compile_options(hub_driver PRIVATE ${SL_WARNINGS})
target_compile_definitions(hub_driver PRIVATE _GNU_SOURCE)

set(SL_HUB_GROUPS basic faults parallel errors locks cli signals nospace)
foreach(group ${SL_HUB_GROUPS})
  if(Python3_Interpreter_FOUND)
    add_test(NAME hub_${group}
      COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/test_hub.py --driver $<TARGET_FILE:hub_driver>
              --cli $<TARGET_FILE:shardload_cli> ${group})
  else()
    add_test(NAME hub_${group} COMMAND sh -c "echo 'python3 not found: hub_${group} skipped'; exit 77")
  endif()
  set_tests_properties(hub_${group} PROPERTIES LABELS hub TIMEOUT 180 SKIP_RETURN_CODE 77
    ENVIRONMENT "${SL_TEST_ENV}")
endforeach()
