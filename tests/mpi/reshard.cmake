# tests/mpi/reshard.cmake — reload in place (sl_loader_reload, docs/spec/DESIGN.md §10) at 1, 2, 3
# and 4 ranks against the independent reference (tests/common/reference.c): another checkpoint of
# the same shapes at the same addresses, refusals that write nothing, bound and mapped parameters,
# a reload failed mid-way. Labels reshard and mpi.
sl_mpi_test(test_reload)
target_sources(test_reload PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/common/reference.c
  ${CMAKE_CURRENT_SOURCE_DIR}/mpi/load_check.c)
target_link_libraries(test_reload PRIVATE m)
foreach(np 1 2 3 4)
  set_tests_properties(test_reload_np${np} PROPERTIES LABELS "reshard;mpi")
endforeach()
