# tests/install/install.cmake — installing and consuming shardload (label install): an install
# into a moved prefix consumed by examples/ with CMake and pkg-config, and the Debian package.
sl_script_test(test_install install sh ${CMAKE_CURRENT_SOURCE_DIR}/install/test_install.sh)
set_tests_properties(test_install PROPERTIES TIMEOUT 300 PROCESSORS 2)
sl_script_test(test_deb install sh ${CMAKE_CURRENT_SOURCE_DIR}/install/test_deb.sh)
set_tests_properties(test_deb PROPERTIES TIMEOUT 300)
sl_script_test(test_nohub install sh ${CMAKE_CURRENT_SOURCE_DIR}/install/test_nohub.sh)
set_tests_properties(test_nohub PROPERTIES TIMEOUT 600 PROCESSORS 2)
