# tests/cli/cli.cmake — the command line's options (aliases, units, did you mean, per-command
# help) and the byte-count units of the configuration.
add_executable(test_config_units cli/test_config_units.c)
target_link_libraries(test_config_units PRIVATE sl_testlib)
target_compile_options(test_config_units PRIVATE ${SL_WARNINGS})
target_compile_definitions(test_config_units PRIVATE _GNU_SOURCE)
add_test(NAME test_config_units COMMAND test_config_units)
set_tests_properties(test_config_units PROPERTIES LABELS "unit;cli" TIMEOUT 60 ENVIRONMENT "${SL_TEST_ENV}")

sl_script_test(test_cli_args unit sh ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_cli_args.sh)
set_tests_properties(test_cli_args PROPERTIES LABELS "unit;cli" TIMEOUT 180 PROCESSORS 2)

# Progress lines of rank 0 in a log (stderr not a terminal) and --progress never / --quiet.
sl_script_test(test_progress cli ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_progress.py)
set_tests_properties(test_progress PROPERTIES LABELS "cli" TIMEOUT 600 PROCESSORS 2)

# `shardload load MODEL --reload MODEL2` (labels reshard and cli): reloads in order, each summarized,
# a refused one failing every rank, the usage errors.
sl_script_test(test_cli_reload cli sh ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_cli_reload.sh)
set_tests_properties(test_cli_reload PROPERTIES LABELS "reshard;cli" TIMEOUT 300 PROCESSORS 2)

# A --save-sharded folder loads back with load format auto, at the saved layout or with no sizes;
# another layout names the saved one; --help lists the load formats and layouts.
sl_script_test(test_cli_saved cli sh ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_cli_saved.sh)
set_tests_properties(test_cli_saved PROPERTIES TIMEOUT 300 PROCESSORS 2)

# Output paths made ready (or refused, naming them) before anything is read; a report that fails
# after the load keeps the save (docs/spec/TRACKING.md §4.6).
sl_script_test(test_cli_outputs cli sh ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_cli_outputs.sh)
set_tests_properties(test_cli_outputs PROPERTIES TIMEOUT 300 PROCESSORS 2)

# What a new user reads agrees with the tool: the man page's subcommands, the scripts' --help, the
# README's paths, docs/CLI.md's names, INSTALL's static-link list.
sl_script_test(test_cli_docs cli sh ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_cli_docs.sh)
set_tests_properties(test_cli_docs PROPERTIES FIXTURES_REQUIRED "" TIMEOUT 60)

# Qwen3-Next and Qwen3.5 through `shardload load` / `plan` at 2 ranks (labels cli, frontier): the
# saved shards' conv1d blocks, the vision tower refused or skipped, tp 3 refused.
sl_script_test(test_cli_qwen_next cli sh ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_cli_qwen_next.sh)
set_tests_properties(test_cli_qwen_next PROPERTIES LABELS "cli;frontier" TIMEOUT 120 PROCESSORS 2)
