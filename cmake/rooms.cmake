# Rooms and the include graph (docs/architecture.md, "Layers").
#
# Every room (src/<room>) is one static library that declares its own include
# directories (pagedkv_room_includes); there is no global include path. Headers
# are addressed "room/file.h" from src/, and which rooms a room may include is the
# table in cmake/rooms_table.cmake, enforced by cmake/check_layers.cmake: the
# target pkv_layering runs it on every build (when a source changed), and every
# room library depends on it, so a forbidden include — src/kv including
# "model/model.h", say — fails the build with a message naming the file, the
# include and the rule.
#
#   pagedkv_room_includes(<target> <room>)  include/ and src/ for <target> (PUBLIC
#                                           for a library), and the layering check.
#   pagedkv_generated_includes(<target>)    build/include (the generated
#                                           pagedkv/version.h), PRIVATE.
include(${CMAKE_CURRENT_LIST_DIR}/rooms_table.cmake)

file(GLOB_RECURSE PAGEDKV_LAYERED_SOURCES CONFIGURE_DEPENDS
     ${PROJECT_SOURCE_DIR}/src/*.h ${PROJECT_SOURCE_DIR}/src/*.cc
     ${PROJECT_SOURCE_DIR}/include/pagedkv/*.h)
add_custom_command(
  OUTPUT ${PROJECT_BINARY_DIR}/layering.stamp
  COMMAND ${CMAKE_COMMAND} -DSOURCE_DIR=${PROJECT_SOURCE_DIR}
          -DSTAMP=${PROJECT_BINARY_DIR}/layering.stamp
          -P ${PROJECT_SOURCE_DIR}/cmake/check_layers.cmake
  DEPENDS ${PAGEDKV_LAYERED_SOURCES} ${PROJECT_SOURCE_DIR}/cmake/check_layers.cmake
          ${PROJECT_SOURCE_DIR}/cmake/rooms_table.cmake
  COMMENT "Checking the include graph (cmake/rooms_table.cmake)"
  VERBATIM)
add_custom_target(pkv_layering DEPENDS ${PROJECT_BINARY_DIR}/layering.stamp)

function(pagedkv_room_includes target room)
  if(NOT room IN_LIST PAGEDKV_ROOMS)
    message(FATAL_ERROR "rooms.cmake: unknown room '${room}' (add it to rooms_table.cmake)")
  endif()
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "INTERFACE_LIBRARY")
    set(scope INTERFACE)
  elseif(type STREQUAL "EXECUTABLE")
    set(scope PRIVATE)
  else()
    set(scope PUBLIC)
  endif()
  # include/ then src/, the same two directories (and order) every compile has
  # always had, so compiler-cache entries stay valid. The generated
  # build/include (pagedkv/version.h) is added only where it is used
  # (pagedkv_generated_includes).
  target_include_directories(${target} ${scope}
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/src>)
  add_dependencies(${target} pkv_layering)
endfunction()

function(pagedkv_generated_includes target)
  target_include_directories(${target} PRIVATE ${PROJECT_BINARY_DIR}/include)
endfunction()
