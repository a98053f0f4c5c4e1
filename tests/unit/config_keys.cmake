# tests/unit/config_keys.cmake — the configuration keys have one owner (src/api/config.c): docs/CLI.md's
# table is what scripts/config-keys writes from the built library, and the other hand-kept lists
# (the notes under that table, docs/HUB-CLIENT.md's knobs, the CLI's per-command lists) name only its keys,
# with its defaults (test_config_keys.py).
sl_script_test(config_keys unit /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_config_keys.py)
set(_sl_config_keys_env ${SL_TEST_ENV} ${SL_PY_LIBRARY_ENV} "SHARDLOAD_LIBRARY=$<TARGET_FILE:shardload>")
set_tests_properties(config_keys PROPERTIES TIMEOUT 60 FIXTURES_REQUIRED "" ENVIRONMENT "${_sl_config_keys_env}")
