# The floors of the house (docs/architecture.md), read from ci/floors.txt - the
# table ci/lint checks too. For every floor this stages an include tree under
# the build folder holding symbolic links to that floor's rooms and the rooms of
# every floor below, and nothing else. A floor's library compiles against its
# staged tree only (not the source root), so an upward #include fails to compile.
#
#   parity_floor_library(NAME ROOM)  a STATIC library for ROOM's floor: its
#       include root is that floor's staged tree; it links the floor below
#       PUBLIC (so consumers see and link everything underneath).
#   parity_floor_include_dir(ROOM OUT)  the staged tree of ROOM's floor (the
#       backends and the tests use the top floor's: they may see everything).

# Lines starting with "#" are comments; "never: A -> B" lines are ci/lint rules.
file(STRINGS "${PROJECT_SOURCE_DIR}/ci/floors.txt" _parity_floor_lines REGEX "^[^#]")
list(FILTER _parity_floor_lines EXCLUDE REGEX "^never:")
set(PARITY_FLOOR_COUNT 0)
set(_parity_staged_rooms "")
foreach(_line IN LISTS _parity_floor_lines)
  string(STRIP "${_line}" _line)
  if(_line STREQUAL "")
    continue()
  endif()
  string(REGEX REPLACE "[ \t]+" ";" _rooms "${_line}")
  set(_floor ${PARITY_FLOOR_COUNT})
  math(EXPR PARITY_FLOOR_COUNT "${PARITY_FLOOR_COUNT} + 1")
  list(APPEND _parity_staged_rooms ${_rooms})
  set(_dir "${CMAKE_BINARY_DIR}/floors/${_floor}")
  file(REMOVE_RECURSE "${_dir}")
  foreach(_room IN LISTS _parity_staged_rooms)
    get_filename_component(_parent "${_dir}/${_room}" DIRECTORY)
    file(MAKE_DIRECTORY "${_parent}")
    file(CREATE_LINK "${PROJECT_SOURCE_DIR}/${_room}" "${_dir}/${_room}" SYMBOLIC)
  endforeach()
  foreach(_room IN LISTS _rooms)
    set(PARITY_FLOOR_OF_${_room} ${_floor})
  endforeach()
  set(PARITY_FLOOR_${_floor}_ROOMS ${_rooms})
endforeach()
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/ci/floors.txt")

function(parity_floor_include_dir room out)
  if(NOT DEFINED PARITY_FLOOR_OF_${room})
    message(FATAL_ERROR "ci/floors.txt names no floor for '${room}'")
  endif()
  set(${out} "${CMAKE_BINARY_DIR}/floors/${PARITY_FLOOR_OF_${room}}" PARENT_SCOPE)
endfunction()

# The library of each floor that has one, by floor index (set by parity_floor_library).
function(parity_floor_library name room)
  parity_floor_include_dir(${room} staged)
  add_library(${name} STATIC ${ARGN})
  target_include_directories(${name} PUBLIC "${staged}")
  target_link_libraries(${name} PUBLIC parity_torch nlohmann_json::nlohmann_json PRIVATE parity_warnings)
  target_precompile_headers(${name} REUSE_FROM parity_pch)
  set(floor ${PARITY_FLOOR_OF_${room}})
  # Link the nearest floor below that has a library.
  set(below ${floor})
  while(below GREATER 0)
    math(EXPR below "${below} - 1")
    get_property(lib GLOBAL PROPERTY PARITY_FLOOR_${below}_LIBRARY)
    if(lib)
      target_link_libraries(${name} PUBLIC ${lib})
      break()
    endif()
  endwhile()
  set_property(GLOBAL PROPERTY PARITY_FLOOR_${floor}_LIBRARY ${name})
  set_property(GLOBAL APPEND PROPERTY PARITY_FLOOR_LIBRARIES ${name})
endfunction()
