# tests/unit/reshard.cmake — the pure part of reload in place (docs/spec/DESIGN.md §10): a new
# checkpoint's plan against the loaded one (src/plan/plan_match.c). Labels reshard and unit.
sl_unit_test(test_plan_match)
set_tests_properties(test_plan_match PROPERTIES LABELS "reshard;unit" TIMEOUT 60)
