# A shard rewritten in place during a load (tests/mpi/test_file_change.c) at 1 to 4 ranks: every
# rank fails naming the file, nothing is saved. Label mpi.
sl_mpi_test(test_file_change)
target_sources(test_file_change PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/common/reference.c
  ${CMAKE_CURRENT_SOURCE_DIR}/mpi/load_check.c)
target_link_libraries(test_file_change PRIVATE m)
