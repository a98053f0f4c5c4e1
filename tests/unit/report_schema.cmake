# tests/unit/report_schema.cmake — real load reports (1 and 3 ranks), dry-run JSON, and a refit's
# report (4 ranks: Python's publish and Loader.refit, numpy and mpi4py) and its dry run against
# docs/report.schema.json (python3-jsonschema; skipped without it). Debian's Python, the package from
# python/ and the build's library, as the Python tests take them.
sl_script_test(test_report_schema unit /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_report_schema.py)
set(_sl_report_schema_env ${SL_TEST_ENV} ${SL_PY_LIBRARY_ENV} "PYTHONPATH=${PROJECT_SOURCE_DIR}/python"
  "SHARDLOAD_LIBRARY=$<TARGET_FILE:shardload>")
set_tests_properties(test_report_schema PROPERTIES LABELS "unit;mpi" TIMEOUT 600 PROCESSORS 4
  ENVIRONMENT "${_sl_report_schema_env}")

# `shardload plan --from-tp`: the peers dry run's figures add up (receivers get what their plan needs,
# donors send it), the network prediction follows its nodes, the JSON validates (peers_dryrun).
sl_script_test(test_plan_peers unit ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_plan_peers.py)
set_tests_properties(test_plan_peers PROPERTIES LABELS "unit;reshard" TIMEOUT 120)
