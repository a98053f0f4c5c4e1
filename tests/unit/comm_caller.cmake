# The caller's communicator (comm/caller.c) over a fake transport of threads; a load through
# sl_loader_create_ops.
sl_unit_test(test_comm_caller)
