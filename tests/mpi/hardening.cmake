# tests/mpi/hardening.cmake — all-or-nothing saves (output/save.h) and the report's phase timings,
# at 1, 2, 3 and 4 ranks, with the shared driver of the byte-exact suite for fixtures and folders.
foreach(t test_save_atomic test_report_phases)
  sl_mpi_test(${t})
  target_sources(${t} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/common/reference.c
    ${CMAKE_CURRENT_SOURCE_DIR}/mpi/load_check.c)
  target_link_libraries(${t} PRIVATE m)
endforeach()
