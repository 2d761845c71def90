# The public library and its installation (docs/library.md).
#
# libpagedkv.a holds the object files of every room below the CLI (util, kv,
# backend, model, jinja, tokenizer, engine) — the same objects the rooms' own
# static libraries are made of, so nothing is compiled twice. Its only include
# directory is include/ (plus the generated include/pagedkv/version.h): src/ is
# never on a user's include path. In this build tree it is pagedkv::pagedkv; an
# installed tree exports the same name through find_package(pagedkv) and
# pkg-config (pagedkv.pc).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

configure_file(${PROJECT_SOURCE_DIR}/cmake/version.h.in
               ${PROJECT_BINARY_DIR}/include/pagedkv/version.h @ONLY)

set(PAGEDKV_LIBRARY_ROOMS pkv_util pkv_kv pkv_backend pkv_model pkv_jinja pkv_tokenizer pkv_engine)
set(pagedkv_objects)
foreach(room ${PAGEDKV_LIBRARY_ROOMS})
  list(APPEND pagedkv_objects $<TARGET_OBJECTS:${room}>)
endforeach()
# The executable is already called `pagedkv`; the library target is pagedkv_library
# with the file name libpagedkv.a and the exported name pagedkv::pagedkv.
add_library(pagedkv_library STATIC ${pagedkv_objects})
set_target_properties(pagedkv_library PROPERTIES OUTPUT_NAME pagedkv EXPORT_NAME pagedkv
                                                 LINKER_LANGUAGE CXX)
target_include_directories(pagedkv_library INTERFACE
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
  $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/include>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_compile_features(pagedkv_library INTERFACE cxx_std_20)
target_link_libraries(pagedkv_library INTERFACE
  OpenSSL::Crypto Threads::Threads PkgConfig::ICU PkgConfig::PCRE2)
add_library(pagedkv::pagedkv ALIAS pagedkv_library)

install(TARGETS pagedkv_library EXPORT pagedkvTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS pagedkv RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/pagedkv ${PROJECT_BINARY_DIR}/include/pagedkv
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
set(PAGEDKV_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/pagedkv)
install(EXPORT pagedkvTargets NAMESPACE pagedkv:: DESTINATION ${PAGEDKV_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/pagedkvConfig.cmake.in
  ${PROJECT_BINARY_DIR}/pagedkvConfig.cmake INSTALL_DESTINATION ${PAGEDKV_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/pagedkvConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/pagedkvConfig.cmake
              ${PROJECT_BINARY_DIR}/pagedkvConfigVersion.cmake
        DESTINATION ${PAGEDKV_CMAKE_DIR})

# pagedkv.pc finds its prefix relative to itself (${pcfiledir}), so the tree stays
# valid after `cmake --install build --prefix DIR` to any DIR.
file(RELATIVE_PATH PAGEDKV_PC_TO_PREFIX ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig
     ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" PAGEDKV_PC_TO_PREFIX "${PAGEDKV_PC_TO_PREFIX}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/pagedkv.pc.in ${PROJECT_BINARY_DIR}/pagedkv.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/pagedkv.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
