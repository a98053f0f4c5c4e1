# tests/unit/report_schema.cmake — real load reports (1 and 3 ranks) and dry-run JSON against
# docs/report.schema.json (python3-jsonschema; skipped without it).
sl_script_test(test_report_schema unit ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_report_schema.py)
set_tests_properties(test_report_schema PROPERTIES LABELS "unit;mpi" TIMEOUT 600 PROCESSORS 3)

# `shardload plan --from-tp`: the peers dry run's figures add up (receivers get what their plan needs,
# donors send it), the network prediction follows its nodes, the JSON validates (peers_dryrun).
sl_script_test(test_plan_peers unit ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_plan_peers.py)
set_tests_properties(test_plan_peers PROPERTIES LABELS "unit;reshard" TIMEOUT 120)
