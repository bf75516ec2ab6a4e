# The rooms of the house (docs/architecture.md): one CMake library per room of ci/floors.txt
# (the table ci/lint reads too), its dependencies declared with target_link_libraries in the
# room's own CMakeLists.txt (PUBLIC for the rooms its headers include, PRIVATE for those only
# its .cpp files include).
#
# Every room compiles against a staged include tree that holds a symbolic link to that room
# alone; a room sees another room's headers only through a declared dependency (whose staged
# tree its target carries as a PUBLIC include directory). An #include of an undeclared room
# fails to compile ("No such file or directory"). parity_check_room_floors() then fails the
# configure step when a declared dependency runs to a room on a higher floor.
#
#   parity_room(NAME ROOM [OBJECT] sources...)  the library NAME of ROOM: STATIC (OBJECT when
#       asked: a backend's static registrations must always link), INTERFACE without sources.
#   parity_room_include_dir(FOLDER OUT)  a staged tree holding FOLDER alone (cuda/kernels).
#   parity_check_room_floors()  after every room is defined (the top-level CMakeLists.txt).

# Lines starting with "#" are comments; a floor's rooms are separated by spaces.
file(STRINGS "${PROJECT_SOURCE_DIR}/ci/floors.txt" _parity_floor_lines REGEX "^[^#]")
set(_parity_floor 0)
set(PARITY_ROOMS "")
foreach(_line IN LISTS _parity_floor_lines)
  string(STRIP "${_line}" _line)
  if(_line STREQUAL "")
    continue()
  endif()
  string(REGEX REPLACE "[ \t]+" ";" _rooms "${_line}")
  foreach(_room IN LISTS _rooms)
    set(PARITY_FLOOR_OF_${_room} ${_parity_floor})
  endforeach()
  list(APPEND PARITY_ROOMS ${_rooms})
  math(EXPR _parity_floor "${_parity_floor} + 1")
endforeach()
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/ci/floors.txt")

function(parity_room_include_dir folder out)
  string(REPLACE "/" "_" key "${folder}")
  set(dir "${CMAKE_BINARY_DIR}/rooms/${key}")
  file(REMOVE_RECURSE "${dir}")
  get_filename_component(parent "${dir}/${folder}" DIRECTORY)
  file(MAKE_DIRECTORY "${parent}")
  file(CREATE_LINK "${PROJECT_SOURCE_DIR}/${folder}" "${dir}/${folder}" SYMBOLIC)
  set(${out} "${dir}" PARENT_SCOPE)
endfunction()

function(parity_room name room)
  if(NOT DEFINED PARITY_FLOOR_OF_${room})
    message(FATAL_ERROR "ci/floors.txt names no floor for the room '${room}' (${name})")
  endif()
  parity_room_include_dir(${room} staged)
  set(sources ${ARGN})
  set(kind STATIC)
  if(sources AND "${ARGV2}" STREQUAL "OBJECT")
    set(kind OBJECT)
    list(REMOVE_AT sources 0)
  endif()
  if(NOT sources AND NOT kind STREQUAL "OBJECT")
    add_library(${name} INTERFACE)
    target_include_directories(${name} INTERFACE "${staged}")
    target_link_libraries(${name} INTERFACE parity_torch)
  else()
    add_library(${name} ${kind} ${sources})
    target_include_directories(${name} PUBLIC "${staged}")
    target_link_libraries(${name} PUBLIC parity_torch nlohmann_json::nlohmann_json
                          PRIVATE parity_warnings)
    target_precompile_headers(${name} REUSE_FROM parity_pch)
  endif()
  set_target_properties(${name} PROPERTIES PARITY_ROOM "${room}")
  set_property(GLOBAL APPEND PROPERTY PARITY_ROOM_TARGETS ${name})
  set_property(GLOBAL PROPERTY PARITY_ROOM_TARGET_OF_${room} ${name})
endfunction()

function(parity_check_room_floors)
  get_property(targets GLOBAL PROPERTY PARITY_ROOM_TARGETS)
  foreach(room IN LISTS PARITY_ROOMS)
    get_property(target GLOBAL PROPERTY PARITY_ROOM_TARGET_OF_${room})
    # cuda/ builds only with the CUDA backend.
    if(NOT target AND NOT (room STREQUAL "cuda" AND NOT PARITY_CUDA_BACKEND))
      message(FATAL_ERROR "ci/floors.txt: the room '${room}' has no library (parity_room)")
    endif()
  endforeach()
  foreach(target IN LISTS targets)
    get_target_property(room ${target} PARITY_ROOM)
    get_target_property(type ${target} TYPE)
    set(deps "")
    if(NOT type STREQUAL "INTERFACE_LIBRARY")
      get_target_property(deps ${target} LINK_LIBRARIES)
    endif()
    get_target_property(interface_deps ${target} INTERFACE_LINK_LIBRARIES)
    foreach(dep IN LISTS deps interface_deps)
      if(NOT TARGET "${dep}")
        continue()
      endif()
      get_target_property(dep_room ${dep} PARITY_ROOM)
      if(dep_room AND PARITY_FLOOR_OF_${dep_room} GREATER PARITY_FLOOR_OF_${room})
        message(FATAL_ERROR "${target} (room ${room}) links ${dep} (room ${dep_room}), "
                            "a room on a higher floor of ci/floors.txt")
      endif()
    endforeach()
  endforeach()
endfunction()
