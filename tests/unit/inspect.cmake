# tests/unit/inspect.cmake — the model-inspection API (shardload.h section 6) and `shardload inspect`.
sl_unit_test(test_inspect)
sl_script_test(test_inspect_cli unit sh ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_inspect_cli.sh)
