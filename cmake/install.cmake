# cmake/install.cmake — what `cmake --install` puts where (GNU directories): the shared and static
# libraries, the public headers (shardload/version.h from the build tree), the specs, the CLI and
# its man page, the examples, a CMake package (find_package(shardload CONFIG) →
# shardload::shardload) and a pkg-config file. Every installed
# file locates the others relatively, so a prefix can be copied elsewhere and still work.
include(CMakePackageConfigHelpers)

set(SL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/shardload)
set(SL_PCDIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

set_target_properties(shardload_static PROPERTIES EXPORT_NAME shardload_static)
install(TARGETS shardload shardload_static EXPORT shardload-targets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS shardload_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/shardload DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} PATTERN "*.in" EXCLUDE)
install(FILES ${SL_GENERATED_INCLUDE_DIR}/shardload/version.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/shardload)
install(DIRECTORY specs/ DESTINATION ${CMAKE_INSTALL_DATADIR}/shardload/specs FILES_MATCHING PATTERN "*.json")
install(FILES packaging/shardload.1 DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
install(FILES examples/CMakeLists.txt examples/load_params.c DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples)

# CMake package.
install(EXPORT shardload-targets NAMESPACE shardload:: DESTINATION ${SL_CMAKEDIR})
configure_package_config_file(cmake/shardload-config.cmake.in
  ${PROJECT_BINARY_DIR}/shardload-config.cmake INSTALL_DESTINATION ${SL_CMAKEDIR} PATH_VARS CMAKE_INSTALL_DATADIR)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/shardload-config-version.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/shardload-config.cmake ${PROJECT_BINARY_DIR}/shardload-config-version.cmake
  DESTINATION ${SL_CMAKEDIR})

# pkg-config file. MPI comes through its own pkg-config module when there is one (Open MPI's
# ompi-c, MPICH's mpich), else as the flags CMake found; the static archive's other dependencies
# are Libs.private. The prefix is derived from the file's own folder (pcfiledir).
pkg_check_modules(_SL_PC_OMPI QUIET ompi-c)
pkg_check_modules(_SL_PC_MPICH QUIET mpich)
set(SL_PC_REQUIRES "")
set(SL_PC_MPI_CFLAGS "")
set(SL_PC_MPI_LIBS "")
if(_SL_PC_OMPI_FOUND)
  set(SL_PC_REQUIRES ompi-c)
elseif(_SL_PC_MPICH_FOUND)
  set(SL_PC_REQUIRES mpich)
else()
  foreach(d ${MPI_C_INCLUDE_DIRS})
    string(APPEND SL_PC_MPI_CFLAGS " -I${d}")
  endforeach()
  foreach(l ${MPI_C_LIBRARIES})
    string(APPEND SL_PC_MPI_LIBS " ${l}")
  endforeach()
endif()
file(RELATIVE_PATH SL_PC_TO_PREFIX ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" SL_PC_TO_PREFIX "${SL_PC_TO_PREFIX}")
file(RELATIVE_PATH SL_PC_LIBDIR ${CMAKE_INSTALL_PREFIX} ${CMAKE_INSTALL_FULL_LIBDIR})
file(RELATIVE_PATH SL_PC_INCLUDEDIR ${CMAKE_INSTALL_PREFIX} ${CMAKE_INSTALL_FULL_INCLUDEDIR})
file(RELATIVE_PATH SL_PC_DATADIR ${CMAKE_INSTALL_PREFIX} ${CMAKE_INSTALL_FULL_DATADIR})
configure_file(cmake/shardload.pc.in ${PROJECT_BINARY_DIR}/shardload.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/shardload.pc DESTINATION ${SL_PCDIR})
