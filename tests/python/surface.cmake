# tests/python/surface.cmake — the package's public surface (label python; after python.cmake,
# whose sl_python_test it uses): a Loader dropped without close() releases this rank's memory
# alone and warns (test_finalizer.py, at 1 and 2 ranks).
sl_python_test(python_finalizer test_finalizer.py 1 2)
