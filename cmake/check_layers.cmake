# The include-graph check (cmake -P). Every quoted #include "room/..." in src/<room>
# must name the room itself or a room that cmake/rooms_table.cmake allows it, and
# include/pagedkv/ may include only "pagedkv/..." (the public API is
# self-contained). Any other include is an error naming the file, the include and
# the rule, and fails the build: every room library depends on this check.
#
#   cmake -DSOURCE_DIR=<tree> [-DSTAMP=<file>] -P cmake/check_layers.cmake
# SOURCE_DIR is the tree to check (tests point it at a small fixture tree).
cmake_minimum_required(VERSION 3.25)
if(NOT SOURCE_DIR)
  message(FATAL_ERROR "check_layers.cmake: pass -DSOURCE_DIR=<tree>")
endif()
include(${CMAKE_CURRENT_LIST_DIR}/rooms_table.cmake)

set(errors "")
function(check_file file room allowed)
  set(errs "")
  file(STRINGS ${file} lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
  foreach(line IN LISTS lines)
    if(NOT line MATCHES "\"([^\"/]+)/[^\"]*\"")
      continue()
    endif()
    set(target ${CMAKE_MATCH_1})
    string(REGEX MATCH "\"[^\"]*\"" inc "${line}")
    file(RELATIVE_PATH rel ${SOURCE_DIR} ${file})
    if(room STREQUAL "pagedkv")
      if(NOT target STREQUAL "pagedkv")
        string(APPEND errs "\n  ${rel}: #include ${inc}: the public headers (include/pagedkv) include only \"pagedkv/...\"")
      endif()
    elseif(target IN_LIST PAGEDKV_ROOMS AND NOT target STREQUAL room AND NOT target IN_LIST allowed)
      string(REPLACE ";" ", " allowed_text "${room};${allowed}")
      string(APPEND errs "\n  ${rel}: #include ${inc}: ${room} may include only ${allowed_text} (and pagedkv/)")
    endif()
  endforeach()
  set(errors "${errors}${errs}" PARENT_SCOPE)
endfunction()

foreach(room IN LISTS PAGEDKV_ROOMS)
  file(GLOB_RECURSE files ${SOURCE_DIR}/src/${room}/*.h ${SOURCE_DIR}/src/${room}/*.cc
       ${SOURCE_DIR}/src/${room}/*.cu ${SOURCE_DIR}/src/${room}/*.cuh)
  foreach(f IN LISTS files)
    check_file(${f} ${room} "${PAGEDKV_ROOM_${room}}")
  endforeach()
endforeach()
file(GLOB_RECURSE public ${SOURCE_DIR}/include/pagedkv/*.h)
foreach(f IN LISTS public)
  check_file(${f} pagedkv "")
endforeach()

if(errors)
  message(FATAL_ERROR "forbidden includes (layering: cmake/rooms_table.cmake, docs/architecture.md):${errors}")
endif()
if(STAMP)
  file(TOUCH ${STAMP})
endif()
