# Ranks that cannot see the checkpoint (tests/mpi/test_visibility.sh): files on rank 0 only, on the
# even ranks, another file or an identical copy at one path, and storage shared refused; every
# rank's bytes against the reference. Each affected rank in its own mount namespace (skips, 77,
# where those cannot be made). Label mpi, at 2, 3 and 4 ranks.
add_executable(test_visibility mpi/test_visibility.c ${CMAKE_CURRENT_SOURCE_DIR}/common/reference.c
  ${CMAKE_CURRENT_SOURCE_DIR}/mpi/load_check.c)
target_link_libraries(test_visibility PRIVATE sl_testlib m)
target_compile_options(test_visibility PRIVATE ${SL_WARNINGS})
target_compile_definitions(test_visibility PRIVATE _GNU_SOURCE)
foreach(np 2 3 4)
  add_test(NAME test_visibility_np${np} COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/mpi/test_visibility.sh ${np}
    $<TARGET_FILE:test_visibility>)
  set_tests_properties(test_visibility_np${np} PROPERTIES LABELS mpi TIMEOUT 300 FIXTURES_REQUIRED models
    ENVIRONMENT "${SL_TEST_ENV}" PROCESSORS ${np} SKIP_RETURN_CODE 77)
endforeach()
