# tests/unit/numa.cmake — the CPUs near a GPU (base/numa.h): parsing, the decision, a fake sysfs tree.
sl_unit_test(test_numa)
