# Weight file selection (docs/spec/FILES.md) and the extra config (docs/spec/FILES.md §6).
sl_unit_test(test_select)
sl_unit_test(test_extra_config)
# Pre-sharded folders: the saved layout in part files, auto's detection (docs/spec/FILES.md §1.4, §3).
sl_unit_test(test_sharded_name)
