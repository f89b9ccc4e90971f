# Finds one cuDNN: headers and library of the same install and the same version (issue 47).
# ATTNSCOPE_CUDNN_ROOT (a folder with include/ and lib/, e.g. PyTorch's nvidia/cudnn wheel) picks the
# install; otherwise PyTorch's cuDNN wheel where it is newer than the headers beside the CUDA toolkit,
# else those headers with the library of their own install first. A pair whose versions differ stops
# the configure, saying how to choose. Sets ATTNSCOPE_CUDNN_INCLUDE, ATTNSCOPE_CUDNN_LIBRARY, ATTNSCOPE_CUDNN_LIBDIR,
# ATTNSCOPE_CUDNN_VERSION, or _cudnn_why when none is found.
set(ATTNSCOPE_CUDNN_ROOT "" CACHE PATH "The cuDNN install to build against (a folder holding include/cudnn.h and lib/)")
# a changed root is searched afresh (the found paths are cached)
if(NOT "${ATTNSCOPE_CUDNN_ROOT}" STREQUAL "${_ATTNSCOPE_CUDNN_ROOT_USED}")
  unset(ATTNSCOPE_CUDNN_INCLUDE CACHE)
  unset(ATTNSCOPE_CUDNN_LIBRARY CACHE)
  set(_ATTNSCOPE_CUDNN_ROOT_USED "${ATTNSCOPE_CUDNN_ROOT}" CACHE INTERNAL "")
endif()
# cuDNN wheels ship only the versioned file (libcudnn.so.9), Debian and the toolkit the plain name
set(_cudnn_names cudnn libcudnn.so.9)
set(_cudnn_libdirs lib lib64 lib/x86_64-linux-gnu lib/${CMAKE_LIBRARY_ARCHITECTURE})
set(_cudnn_hints ${CUDAToolkit_INCLUDE_DIRS} /usr/include /usr/include/x86_64-linux-gnu)

# "9.19.0" from DIR/cudnn_version.h ("0" without one)
function(_attnscope_cudnn_header_version dir out)
  set(_v 0)
  if(EXISTS "${dir}/cudnn_version.h")
    file(STRINGS "${dir}/cudnn_version.h" _cv REGEX "#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) ")
    string(REGEX REPLACE ".*CUDNN_MAJOR ([0-9]+).*CUDNN_MINOR ([0-9]+).*CUDNN_PATCHLEVEL ([0-9]+).*" "\\1.\\2.\\3" _v "${_cv}")
  endif()
  set(${out} "${_v}" PARENT_SCOPE)
endfunction()

set(_cudnn_root "${ATTNSCOPE_CUDNN_ROOT}")
if(NOT _cudnn_root AND NOT ATTNSCOPE_CUDNN_INCLUDE)
  # Nothing named: PyTorch's cuDNN wheel where it is newer than the system's, since it is the library
  # PyTorch's SDPA runs and an older cuDNN refuses more (9.14 has no paged FP8 SDPA on Hopper).
  find_program(_cudnn_python NAMES python3)
  find_path(_cudnn_sys_include cudnn_version.h HINTS ${_cudnn_hints} NO_CACHE)
  if(_cudnn_python)
    execute_process(COMMAND ${_cudnn_python} -c "import nvidia.cudnn as m; print(list(m.__path__)[0])"
                    OUTPUT_VARIABLE _wheel OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    _attnscope_cudnn_header_version("${_wheel}/include" _wheel_v)
    _attnscope_cudnn_header_version("${_cudnn_sys_include}" _sys_v)
    if(_wheel AND _wheel_v VERSION_GREATER _sys_v)
      set(_cudnn_root "${_wheel}")
      message(STATUS "attnscope: cudnn: PyTorch's wheel (${_wheel_v}) is newer than the system's (${_sys_v}): building against it")
    endif()
  endif()
endif()
if(_cudnn_root)
  find_path(ATTNSCOPE_CUDNN_INCLUDE cudnn_version.h PATHS "${_cudnn_root}/include" "${_cudnn_root}/include/x86_64-linux-gnu"
            NO_DEFAULT_PATH)
  find_library(ATTNSCOPE_CUDNN_LIBRARY NAMES ${_cudnn_names} PATHS "${_cudnn_root}" PATH_SUFFIXES ${_cudnn_libdirs} NO_DEFAULT_PATH)
else()
  find_path(ATTNSCOPE_CUDNN_INCLUDE cudnn_version.h HINTS ${_cudnn_hints})
  if(ATTNSCOPE_CUDNN_INCLUDE)
    # the install the headers came from: <root>/include or <root>/include/<triplet>
    get_filename_component(_root "${ATTNSCOPE_CUDNN_INCLUDE}" DIRECTORY)
    if(NOT ATTNSCOPE_CUDNN_INCLUDE MATCHES "/include$")
      get_filename_component(_root "${_root}" DIRECTORY)
    endif()
    find_library(ATTNSCOPE_CUDNN_LIBRARY NAMES ${_cudnn_names} PATHS "${_root}" PATH_SUFFIXES ${_cudnn_libdirs} NO_DEFAULT_PATH)
  endif()
  find_library(ATTNSCOPE_CUDNN_LIBRARY NAMES ${_cudnn_names} HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/lib/x86_64-linux-gnu)
endif()
if(NOT ATTNSCOPE_CUDNN_INCLUDE OR NOT ATTNSCOPE_CUDNN_LIBRARY)
  if(_cudnn_root)
    set(_cudnn_why "no cuDNN (cudnn_version.h, libcudnn) under ${_cudnn_root}")
  else()
    set(_cudnn_why "cuDNN (cudnn.h, libcudnn) not found beside the CUDA toolkit (-DATTNSCOPE_CUDNN_ROOT=DIR names one)")
  endif()
  return()
endif()

_attnscope_cudnn_header_version("${ATTNSCOPE_CUDNN_INCLUDE}" ATTNSCOPE_CUDNN_VERSION)
get_filename_component(_cudnn_real "${ATTNSCOPE_CUDNN_LIBRARY}" REALPATH)
get_filename_component(ATTNSCOPE_CUDNN_LIBDIR "${_cudnn_real}" DIRECTORY)
# The library's own version: the file loaded by its path by a probe (not whatever the loader finds).
try_run(_cudnn_run _cudnn_compiled "${CMAKE_CURRENT_BINARY_DIR}/cudnn_probe" "${CMAKE_CURRENT_SOURCE_DIR}/cudnn_library_version.cpp"
        LINK_LIBRARIES ${CMAKE_DL_LIBS} RUN_OUTPUT_VARIABLE _lv ARGS "${_cudnn_real}")
set(_lib_version "unknown")
if(_cudnn_compiled AND _cudnn_run EQUAL 0 AND _lv MATCHES "^([0-9]+)([0-9][0-9])([0-9][0-9])")
  math(EXPR _minor "${CMAKE_MATCH_2}")
  math(EXPR _patch "${CMAKE_MATCH_3}")
  set(_lib_version "${CMAKE_MATCH_1}.${_minor}.${_patch}")
endif()
message(STATUS "attnscope: cudnn: headers ${ATTNSCOPE_CUDNN_VERSION} (${ATTNSCOPE_CUDNN_INCLUDE}), library ${_lib_version} "
               "(${_cudnn_real}), linked with an RPATH to ${ATTNSCOPE_CUDNN_LIBDIR}")
if(_lib_version STREQUAL "unknown")
  message(WARNING "attnscope: cudnn: could not read the version of ${_cudnn_real}; attnscope-cli backends says which runs")
elseif(NOT _lib_version STREQUAL ATTNSCOPE_CUDNN_VERSION)
  message(FATAL_ERROR
    "attnscope: cudnn: the headers (${ATTNSCOPE_CUDNN_INCLUDE}, cuDNN ${ATTNSCOPE_CUDNN_VERSION}) and the library "
    "(${_cudnn_real}, cuDNN ${_lib_version}) are different versions: the frontend built on one fails inside the other. "
    "Choose one install with -DATTNSCOPE_CUDNN_ROOT=DIR (DIR holds include/cudnn_version.h and lib/libcudnn.so*; "
    "e.g. PyTorch's wheel: python3 -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])'), "
    "or build without cuDNN (-DATTNSCOPE_CUDNN=OFF).")
endif()
