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

# Loading from peers (sl_loader_load_from_peers, docs/spec/DESIGN.md §11) at 2 to 6 ranks: donors in
# one layout, receivers in another, against the reference; receivers read nothing, donors unchanged.
add_executable(test_reshard mpi/test_reshard.c ${CMAKE_CURRENT_SOURCE_DIR}/common/reference.c
  ${CMAKE_CURRENT_SOURCE_DIR}/mpi/load_check.c ${CMAKE_CURRENT_SOURCE_DIR}/mpi/reshard_common.c)
target_link_libraries(test_reshard PRIVATE sl_testlib m)
target_compile_options(test_reshard PRIVATE ${SL_WARNINGS})
target_compile_definitions(test_reshard PRIVATE _GNU_SOURCE)
foreach(np 2 3 4 5 6)
  add_test(NAME test_reshard_np${np} COMMAND ${SL_MPIRUN} -np ${np} $<TARGET_FILE:test_reshard>)
  set_tests_properties(test_reshard_np${np} PROPERTIES LABELS "reshard;mpi" TIMEOUT 300 FIXTURES_REQUIRED models
    ENVIRONMENT "${SL_TEST_ENV}" PROCESSORS ${np})
endforeach()

# Loading from peers with the job posing as two nodes (SHARDLOAD_INJECT_HOST), at 4 and 6 ranks: replicas
# of the receivers' node relay what crosses its link once, byte for byte as the reference; the
# receivers' report predicts what the dry run of the layout pair predicts.
add_executable(test_reshard_nodes mpi/test_reshard_nodes.c ${CMAKE_CURRENT_SOURCE_DIR}/common/reference.c
  ${CMAKE_CURRENT_SOURCE_DIR}/mpi/load_check.c ${CMAKE_CURRENT_SOURCE_DIR}/mpi/reshard_common.c)
target_link_libraries(test_reshard_nodes PRIVATE sl_testlib m)
target_compile_options(test_reshard_nodes PRIVATE ${SL_WARNINGS})
target_compile_definitions(test_reshard_nodes PRIVATE _GNU_SOURCE)
foreach(np 4 6)
  add_test(NAME test_reshard_nodes_np${np} COMMAND ${SL_MPIRUN} -np ${np} $<TARGET_FILE:test_reshard_nodes>)
  set_tests_properties(test_reshard_nodes_np${np} PROPERTIES LABELS "reshard;mpi" TIMEOUT 300
    FIXTURES_REQUIRED models ENVIRONMENT "${SL_TEST_ENV}" PROCESSORS ${np})
endforeach()

# `shardload reshard`: the receivers' saved copy equals a storage load's, the report lists both sides.
add_test(NAME test_reshard_cli COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/mpi/test_reshard_cli.sh)
set_tests_properties(test_reshard_cli PROPERTIES LABELS "reshard;mpi" TIMEOUT 600 FIXTURES_REQUIRED models
  ENVIRONMENT "${SL_TEST_ENV}" PROCESSORS 6)
