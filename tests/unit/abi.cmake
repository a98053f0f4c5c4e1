# tests/unit/abi.cmake — the version and the ABI (shardload/core.h section 0): the library's
# version and sl_abi, and the size rule of the structs the caller allocates (test_abi.c).
sl_unit_test(test_abi)
