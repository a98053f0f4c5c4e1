# tests/mpi/frontier_minimax.cmake — MiniMax-M2 (q/k norms over every head, block_sparse_moe, block
# fp8) byte-exact at 1, 2, 3 and 4 ranks against the independent reference
# (tests/common/reference_minimax.c), with its bad inputs: test_load_minimax (labels mpi;frontier).
sl_mpi_test(test_load_minimax)
target_sources(test_load_minimax PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/common/reference.c
  ${CMAKE_CURRENT_SOURCE_DIR}/mpi/load_check.c)
target_link_libraries(test_load_minimax PRIVATE m)
foreach(np 1 2 3 4)
  set_tests_properties(test_load_minimax_np${np} PROPERTIES LABELS "mpi;frontier")
endforeach()
