# Pure layout and planning tests (no MPI).
sl_unit_test(test_layout)
sl_unit_test(test_plan)
sl_unit_test(test_dryrun)
set_tests_properties(test_dryrun PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
sl_unit_test(test_model)
sl_unit_test(test_readplan)
