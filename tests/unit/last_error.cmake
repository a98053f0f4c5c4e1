# tests/unit/last_error.cmake — sl_last_error, the one channel of error messages, against every older
# channel and across threads; the Hub causes' names (test_last_error.c).
sl_unit_test(test_last_error)
