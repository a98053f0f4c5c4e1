# Unit tests named for the module they test (src/model/expr.c, src/api/config.c, ...).
sl_unit_test(test_expr)
sl_unit_test(test_config)
sl_unit_test(test_natsort)
sl_unit_test(test_stats)
sl_unit_test(test_save)
sl_unit_test(test_filemap)
sl_unit_test(test_strategy_choice)
sl_unit_test(test_twophase_choice)
# Missing/unexpected weight tracking: the bitmap reduction needs a communicator.
sl_mpi_test(test_coverage)
