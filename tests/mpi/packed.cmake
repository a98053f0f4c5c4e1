# tests/mpi/packed.cmake — byte-exact loads of the pack-quantized and NVFP4 fixtures
# (scripts/fixtures/packed.py) at 1, 2, 3 and 4 ranks against the independent reference
# (tests/common/reference_packed*.c), and their bad inputs.
sl_mpi_test(test_load_packed)
target_sources(test_load_packed PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/common/reference.c
  ${CMAKE_CURRENT_SOURCE_DIR}/mpi/load_check.c)
target_link_libraries(test_load_packed PRIVATE m)
foreach(np 1 2 3 4)
  set_tests_properties(test_load_packed_np${np} PROPERTIES LABELS "mpi;frontier")
endforeach()
