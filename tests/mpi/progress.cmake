# tests/mpi/progress.cmake — the progress callback of the C API at 1, 2, 3 and 4 ranks.
sl_mpi_test(test_progress_cb)
