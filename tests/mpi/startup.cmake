# Start-up costs that must not grow with the job (tests/mpi/test_startup.py): at 8 ranks on 2
# simulated nodes and at 2 ranks on 2, a rank that is not the first of its node opens each shard
# file of a 4-file model at most once, the first at most twice (counted by strace, else by the
# LD_PRELOAD counter open_count.c, and by the library: equal); the report on rank 1 no larger at 8
# ranks than at 2 + 10 %. Label mpi.
add_executable(test_startup mpi/test_startup.c ${CMAKE_CURRENT_SOURCE_DIR}/common/reference.c
  ${CMAKE_CURRENT_SOURCE_DIR}/mpi/load_check.c)
target_link_libraries(test_startup PRIVATE sl_testlib m)
target_compile_options(test_startup PRIVATE ${SL_WARNINGS})
target_compile_definitions(test_startup PRIVATE _GNU_SOURCE)
add_library(sl_open_count MODULE mpi/open_count.c)
target_link_libraries(sl_open_count PRIVATE ${CMAKE_DL_LIBS} Threads::Threads)
target_compile_options(sl_open_count PRIVATE ${SL_WARNINGS})
if(Python3_Interpreter_FOUND)
  add_test(NAME test_startup COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/mpi/test_startup.py
    $<TARGET_FILE:test_startup>)
else()
  add_test(NAME test_startup COMMAND sh -c "echo 'python3 not found: skipped'; exit 77")
endif()
set_tests_properties(test_startup PROPERTIES LABELS mpi TIMEOUT 300 FIXTURES_REQUIRED models PROCESSORS 8
  SKIP_RETURN_CODE 77 ENVIRONMENT "${SL_TEST_ENV};SL_OPEN_COUNT_SO=$<TARGET_FILE:sl_open_count>")
