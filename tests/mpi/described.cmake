# tests/mpi/described.cmake — loads from caller-described plans at 1-4 ranks (labels mpi, recorded;
# docs/spec/DESIGN.md §12): each rank's plan made from the independent reference's table of its rank
# (tests/mpi/described_ref.c), loaded byte-exact with amplification 1.00 and reads as planned; a
# fallback parameter; an architecture without a spec; refusals on every rank before any byte is read;
# unexpected tensors, strict and not (tests/mpi/test_load_described.c).
sl_mpi_test(test_load_described)
target_sources(test_load_described PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/common/reference.c
  ${CMAKE_CURRENT_SOURCE_DIR}/mpi/load_check.c ${CMAKE_CURRENT_SOURCE_DIR}/mpi/described_ref.c)
target_link_libraries(test_load_described PRIVATE m)
foreach(np 1 2 3 4)
  set_tests_properties(test_load_described_np${np} PROPERTIES LABELS "mpi;recorded")
endforeach()
