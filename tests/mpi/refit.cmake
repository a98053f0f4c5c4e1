# Weight sync (sl_publish / sl_loader_refit, docs/spec/DESIGN.md §13) under mpirun, labels refit and
# mpi: trainers publish blocks filled from the value function with a version's transformation,
# receivers refit, every byte against the independent reference (tests/mpi/refit_common.h).
set(_sl_refit_common ${CMAKE_CURRENT_SOURCE_DIR}/mpi/refit_common.c ${CMAKE_CURRENT_SOURCE_DIR}/mpi/reshard_common.c
  ${CMAKE_CURRENT_SOURCE_DIR}/common/reference.c ${CMAKE_CURRENT_SOURCE_DIR}/mpi/load_check.c)

# 1-3 trainers x 1-4 receivers: versions in a row and back, a repeat moving nothing, layouts, dtypes,
# two nodes with relays.
add_executable(test_refit mpi/test_refit.c ${_sl_refit_common})
target_link_libraries(test_refit PRIVATE sl_testlib m)
target_compile_options(test_refit PRIVATE ${SL_WARNINGS})
target_compile_definitions(test_refit PRIVATE _GNU_SOURCE)
foreach(np 2 3 4 5 6)
  add_test(NAME test_refit_np${np} COMMAND ${SL_MPIRUN} -np ${np} $<TARGET_FILE:test_refit>)
  set_tests_properties(test_refit_np${np} PROPERTIES LABELS "refit;mpi" TIMEOUT 300 FIXTURES_REQUIRED models
    ENVIRONMENT "${SL_TEST_ENV}" PROCESSORS ${np})
endforeach()

# Refusals before any byte moves, and a refit failed mid-way then completed.
add_executable(test_refit_faults mpi/test_refit_faults.c ${_sl_refit_common})
target_link_libraries(test_refit_faults PRIVATE sl_testlib m)
target_compile_options(test_refit_faults PRIVATE ${SL_WARNINGS})
target_compile_definitions(test_refit_faults PRIVATE _GNU_SOURCE)
foreach(np 2 3 4)
  add_test(NAME test_refit_faults_np${np} COMMAND ${SL_MPIRUN} -np ${np} $<TARGET_FILE:test_refit_faults>)
  set_tests_properties(test_refit_faults_np${np} PROPERTIES LABELS "refit;mpi" TIMEOUT 300 FIXTURES_REQUIRED models
    ENVIRONMENT "${SL_TEST_ENV}" PROCESSORS ${np})
endforeach()
