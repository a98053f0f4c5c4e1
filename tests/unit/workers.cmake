# tests/unit/workers.cmake — the thread group helper (base/workers.h).
sl_unit_test(test_workers)
