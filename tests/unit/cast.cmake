# tests/unit/cast.cmake — the element conversions of sl_loader_bind_as (src/format/cast.c) against
# values worked out independently (known bit patterns, every 16-bit value, every rounding boundary).
sl_unit_test(test_cast)
target_link_libraries(test_cast PRIVATE m)
# The checks and the record of sl_loader_bind / sl_loader_bind_as (src/api/bind.c), no MPI.
sl_unit_test(test_bind_as)
