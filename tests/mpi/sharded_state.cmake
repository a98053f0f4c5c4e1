# tests/mpi/sharded_state.cmake — pre-sharded checkpoints (load format sharded_state): round trips
# load → save-sharded → load at 1, 2, 3 and 4 ranks, and the world-size errors.
sl_mpi_test(test_sharded_state)
target_sources(test_sharded_state PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/common/reference.c
  ${CMAKE_CURRENT_SOURCE_DIR}/mpi/load_check.c)
target_link_libraries(test_sharded_state PRIVATE m)
