# What every backend family folder (backends/<name>/) uses: where scripts/fetch-peers.sh unpacked the
# pinned packages, how to read a pin, and attnscope_family_target(), the one call that turns the
# folder's library into a family (docs/architecture.md, "Adding a family").
set(ATTNSCOPE_DEPS_DIR "${PROJECT_SOURCE_DIR}/.deps" CACHE PATH "Where scripts/fetch-peers.sh unpacked the pinned headers")

# The pin a fetched package recorded (.deps/<name>/.pin), or "unknown version".
function(attnscope_read_pin dir out)
  set(_v "unknown version")
  if(EXISTS "${dir}/.pin")
    file(READ "${dir}/.pin" _v)
    string(STRIP "${_v}" _v)
  endif()
  set(${out} "${_v}" PARENT_SCOPE)
endfunction()

# attnscope_family_target(NAME COMPILED WHY): the folder has defined the static library
# attnscope_family_<NAME> holding its family.cpp (and, when COMPILED, its backends). This gives
# its sources ATTNSCOPE_FAMILY_COMPILED (0/1) and ATTNSCOPE_FAMILY_WHY, links the backend floor's
# core, and prints the configure line: found with what, or not found with why.
function(attnscope_family_target name compiled why)
  set(_t attnscope_family_${name})
  if(compiled)
    set(_c 1)
  else()
    set(_c 0)
  endif()
  target_compile_definitions(${_t} PRIVATE ATTNSCOPE_FAMILY_COMPILED=${_c} "ATTNSCOPE_FAMILY_WHY=\"${why}\"")
  target_include_directories(${_t} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  target_link_libraries(${_t} PUBLIC attnscope_backend_core)
  set_target_properties(${_t} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  attnscope_compile_options(${_t})
  if(compiled)
    message(STATUS "attnscope: family ${name}: compiled")
  else()
    message(STATUS "attnscope: family ${name}: not compiled (${why})")
  endif()
endfunction()
