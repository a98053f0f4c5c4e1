# tests/unit/pt.cmake — hostile and unsupported torch.save files refused with clear errors through
# `shardload inspect` (docs/spec/FILES.md §8); needs torch for /usr/bin/python3, else skipped (77).
sl_script_test(test_pt_hostile unit /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_pt_hostile.py)
