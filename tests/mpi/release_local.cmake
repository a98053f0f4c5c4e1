# tests/mpi/release_local.cmake — sl_loader_release_local talks to no other rank (the finalizer's
# release: Python's Loader.__del__), at 1, 2, 3 and 4 ranks.
sl_mpi_test(test_release_local)
