# tests/unit/limits.cmake — resource bounds on inputs and the quoting of names in messages.
sl_unit_test(test_limits)
