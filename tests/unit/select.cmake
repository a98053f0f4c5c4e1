# Weight file selection (LOADER.md §1) and the extra config (LOADER.md §2).
sl_unit_test(test_select)
sl_unit_test(test_extra_config)
