# tests/unit/reshard.cmake — the pure part of reload in place, loading from peers and weight sync;
# reload in place (docs/spec/DESIGN.md §10): a new
# checkpoint's plan against the loaded one (src/plan/plan_match.c). Labels reshard and unit.
sl_unit_test(test_plan_match)
set_tests_properties(test_plan_match PROPERTIES LABELS "reshard;unit" TIMEOUT 60)
# The plan of a load from peers (docs/spec/DESIGN.md §11, src/plan/peers.c) against a byte-by-byte simulation.
sl_unit_test(test_peer_plan)
set_tests_properties(test_peer_plan PROPERTIES LABELS "reshard;unit" TIMEOUT 60)
# Weight sync's pure part (docs/spec/DESIGN.md §13, src/plan/refit_blocks.c, refit_describe.c,
# peer_subset.c): published blocks as copies, their checks, the wire form, the plan simulated byte by
# byte, subsets of a plan, the dry run's descriptions. Labels refit and unit.
sl_unit_test(test_refit_plan)
set_tests_properties(test_refit_plan PROPERTIES LABELS "refit;unit" TIMEOUT 60)
# `shardload plan --from-publishers` (the refit's dry run): trainers hold their blocks' bytes as the
# headers give them, receivers receive what a storage dry run says they need, the sums and the
# prediction add up, refusals name the tensor. Labels unit and refit.
sl_script_test(test_plan_refit unit ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_plan_refit.py)
set_tests_properties(test_plan_refit PROPERTIES LABELS "unit;refit" TIMEOUT 120)
