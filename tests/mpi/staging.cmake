sl_mpi_test(test_staging_ring)
sl_mpi_test(test_bind)
