# tests/unit/reshard.cmake — the pure part of reload in place (docs/spec/DESIGN.md §10): a new
# checkpoint's plan against the loaded one (src/plan/plan_match.c). Labels reshard and unit.
sl_unit_test(test_plan_match)
set_tests_properties(test_plan_match PROPERTIES LABELS "reshard;unit" TIMEOUT 60)
# The plan of a load from peers (docs/spec/DESIGN.md §11, src/plan/peers.c) against a byte-by-byte simulation.
sl_unit_test(test_peer_plan)
set_tests_properties(test_peer_plan PROPERTIES LABELS "reshard;unit" TIMEOUT 60)
