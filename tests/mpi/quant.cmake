# tests/mpi/quant.cmake — byte-exact loads of the quantized fixtures (scripts/fixtures/quant.py, int4.py) at
# 1, 2, 3 and 4 ranks against the independent reference (tests/common/reference.c).
sl_mpi_test(test_load_quant)
target_sources(test_load_quant PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/common/reference.c
  ${CMAKE_CURRENT_SOURCE_DIR}/mpi/load_check.c)
target_link_libraries(test_load_quant PRIVATE m)
