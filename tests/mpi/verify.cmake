# tests/mpi/verify.cmake — the byte-exact multi-rank suite of the loader (docs/TESTING.md): every
# test runs at 1, 2, 3 and 4 ranks (label mpi) and compares what the loader holds on every rank with
# the independent reference of docs/spec/LAYOUTS.md's slicing rules (tests/common/reference.c), compiled into
# each test together with the shared driver tests/mpi/load_check.c.
set(SL_VERIFY_TESTS test_load_dense test_load_moe test_load_strategies test_load_auto test_load_failures
  test_save_sharded test_twophase)
foreach(t ${SL_VERIFY_TESTS})
  sl_mpi_test(${t})
  target_sources(${t} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/common/reference.c
    ${CMAKE_CURRENT_SOURCE_DIR}/mpi/load_check.c)
  target_link_libraries(${t} PRIVATE m)
endforeach()
