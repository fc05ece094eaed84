# Installing kiln (docs/install.md): the layers' static libraries, the public headers, the `kiln` program, a
# CMake package (find_package(kiln CONFIG) -> kiln::kiln) and a pkg-config file (kiln.pc). Included from the
# top-level CMakeLists.txt after every target is defined.
#
# Not offered with KILN_DEPS_DIR (the GPU machine's dependency folder): there xxHash and GoogleTest are built
# from sources as targets of kiln's own, which a package could not hand on to its users.
if(KILN_DEPS_DIR)
  message(STATUS "kiln: install is not offered with KILN_DEPS_DIR (dependencies built from a folder)")
  return()
endif()
include(CMakePackageConfigHelpers)

set(KILN_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)
install(TARGETS ${KILN_LAYERS} kiln_library EXPORT kilnTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT devel
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/kiln DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT devel)
if(TARGET kiln_onnx_plugin)  # beside the static libraries: an installed bin/kiln finds it in ../lib
  install(TARGETS kiln_onnx_plugin LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime)
endif()
if(TARGET kiln_cli)
  install(TARGETS kiln_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT tools)
endif()
install(EXPORT kilnTargets NAMESPACE kiln:: DESTINATION ${KILN_INSTALL_CMAKEDIR} COMPONENT devel)
configure_package_config_file(cmake/kilnConfig.cmake.in ${PROJECT_BINARY_DIR}/kilnConfig.cmake
                              INSTALL_DESTINATION ${KILN_INSTALL_CMAKEDIR})
# 0.x: a minor version may change the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/kilnConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/kilnConfig.cmake ${PROJECT_BINARY_DIR}/kilnConfigVersion.cmake
        DESTINATION ${KILN_INSTALL_CMAKEDIR} COMPONENT devel)

# kiln.pc: the layers top to bottom (static libraries resolve left to right), then what they link.
set(KILN_PC_LIBS "-lkiln_profile -lkiln_runtime -lkiln_codegen -lkiln_cache -lkiln_json -lkiln_onnx_loader -lkiln_passes -lkiln_ir -lkiln_support")
set(KILN_PC_PRIVATE "-lfmt -lxxhash -ldl -lpthread")
if(KILN_HAVE_REDIS)
  string(PREPEND KILN_PC_PRIVATE "-lhiredis ")
endif()
configure_file(cmake/kiln.pc.in ${PROJECT_BINARY_DIR}/kiln.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/kiln.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT devel)
