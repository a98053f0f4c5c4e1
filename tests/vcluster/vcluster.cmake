# Multi-node tests on the virtual cluster (label vcluster, scripts/vcluster): ranks in network
# namespaces ("nodes") on a bridge, Open MPI over TCP between them, the fixtures served over the
# emulated network by sshd/sshfs. Needs root, network namespaces, FUSE, sshfs/sshd and nftables;
# otherwise every test is skipped (exit 77, the reason printed). Each group brings its own cluster
# up and down; they run one at a time (RUN_SERIAL: the link-rate checks need the CPUs).
add_executable(vc_load ${CMAKE_CURRENT_LIST_DIR}/vc_load.c ${CMAKE_CURRENT_LIST_DIR}/../common/reference.c
               ${CMAKE_CURRENT_LIST_DIR}/../mpi/load_check.c)
target_include_directories(vc_load PRIVATE ${CMAKE_CURRENT_LIST_DIR}/../mpi)
target_link_libraries(vc_load PRIVATE sl_testlib m)
target_compile_options(vc_load PRIVATE ${SL_WARNINGS})
target_compile_definitions(vc_load PRIVATE _GNU_SOURCE)

set(SL_VCLUSTER_GROUPS 2x2 3x1 hub slow_link page_cache 2x2_local 3x1_local hub_local)
foreach(group ${SL_VCLUSTER_GROUPS})
  if(Python3_Interpreter_FOUND)
    add_test(NAME vcluster_${group}
      COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/test_vcluster.py --vc-load $<TARGET_FILE:vc_load> ${group})
  else()
    add_test(NAME vcluster_${group} COMMAND sh -c "echo 'python3 not found: skipped'; exit 77")
  endif()
  set_tests_properties(vcluster_${group} PROPERTIES LABELS vcluster TIMEOUT 420 SKIP_RETURN_CODE 77
    FIXTURES_REQUIRED models RUN_SERIAL TRUE ENVIRONMENT "${SL_TEST_ENV}")
endforeach()

# Faults between nodes mid-load (tests/vcluster/faults.py): link down, a node's processes killed,
# 30 % packet loss, a link 100x slower than the others; the load watchdog at timeout_s = 5.
foreach(fault link_down kill loss slow_link)
  if(Python3_Interpreter_FOUND)
    add_test(NAME vcluster_fault_${fault}
      COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/faults.py --cli $<TARGET_FILE:shardload_cli>
              --build ${CMAKE_BINARY_DIR} --timeout-s 5 ${fault})
  else()
    add_test(NAME vcluster_fault_${fault} COMMAND sh -c "echo 'python3 not found: skipped'; exit 77")
  endif()
  set_tests_properties(vcluster_fault_${fault} PROPERTIES LABELS vcluster TIMEOUT 360 SKIP_RETURN_CODE 77
    RUN_SERIAL TRUE ENVIRONMENT "${SL_TEST_ENV}")
endforeach()
