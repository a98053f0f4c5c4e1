# cmake/package.cmake — the Debian package: `cpack -G DEB` in the build folder writes
# shardload_<version>_<arch>.deb with the library (shared and static), the header, the CMake and
# pkg-config files, the specs, the CLI, its man page and the examples, installed under /usr.
# Dependencies are Debian 12's runtime library packages, named explicitly; the -dev packages a
# program built against the header needs (Open MPI's for <mpi.h>) are recommended.
set(CPACK_PACKAGE_NAME shardload)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "shardload")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGE_CONTACT "shardload maintainers <shardload@localhost>")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES OFF)
set(CPACK_GENERATOR DEB)

set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION "${PROJECT_DESCRIPTION}
 libshardload and the shardload command: each rank of an MPI job reads only its own
 tensor-parallel slices and experts of a Hugging Face safetensors checkpoint; shared bytes are
 broadcast.")
set(_sl_deb_depends "openmpi-bin" "libopenmpi3" "libcjson1")
if(SL_HUB)
  list(APPEND _sl_deb_depends "libcurl4" "libssl3")
endif()
if(SL_HAVE_S3)
  list(APPEND _sl_deb_depends "libcurl4" "libexpat1")
endif()
list(REMOVE_DUPLICATES _sl_deb_depends)
if(LIBURING_FOUND)
  list(APPEND _sl_deb_depends "liburing2")
endif()
string(REPLACE ";" ", " CPACK_DEBIAN_PACKAGE_DEPENDS "${_sl_deb_depends}")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "libopenmpi-dev, pkg-config")
# The package builds on the build machine's architecture; dpkg names it (amd64, arm64...).
find_program(SL_DPKG dpkg)
if(SL_DPKG)
  execute_process(COMMAND ${SL_DPKG} --print-architecture OUTPUT_VARIABLE CPACK_DEBIAN_PACKAGE_ARCHITECTURE
    OUTPUT_STRIP_TRAILING_WHITESPACE)
endif()
include(CPack)
