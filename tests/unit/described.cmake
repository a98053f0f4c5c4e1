# Caller-described plans without MPI (labels unit, recorded; docs/spec/DESIGN.md §12): regions made
# copies against an element-by-element expansion, every validation rule, the JSON form
# (tests/unit/test_described.c); a described plan of the llama fixture written from
# docs/spec/LAYOUTS.md equal to the spec's plan at several layouts (tests/unit/test_described_spec.c).
sl_unit_test(test_described)
set_tests_properties(test_described PROPERTIES LABELS "unit;recorded" TIMEOUT 120)
sl_unit_test(test_described_spec)
set_tests_properties(test_described_spec PROPERTIES LABELS "unit;recorded" TIMEOUT 120)
