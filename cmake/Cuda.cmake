# CUDA detection. With a CUDA compiler the GPU backends are built, by default for the GPUs this
# machine has (nvidia-smi's compute capabilities) or for sm_90 alone where it has none (CI); pass
# -DCMAKE_CUDA_ARCHITECTURES to build for others. Without a CUDA compiler the backends are stubs
# that report "not compiled".
set(ATTNSCOPE_HAS_CUDA OFF)
if(ATTNSCOPE_CUDA)
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # Whether this machine has a GPU (nvidia-smi lists one): the kernel families' AUTO options compile
    # their full instantiation lists only where they can run (a machine without one, such as CI,
    # compiles one head dim of the peers' kernels: docs/architecture.md "What CI compiles").
    execute_process(COMMAND nvidia-smi --query-gpu=compute_cap --format=csv,noheader RESULT_VARIABLE _smi_rc
                    OUTPUT_VARIABLE _smi_out ERROR_QUIET)
    set(_gpu_archs)
    if(_smi_rc EQUAL 0)
      string(REGEX MATCHALL "[0-9]+\\.[0-9]+" _ccs "${_smi_out}")
      foreach(_cc IN LISTS _ccs)
        string(REPLACE "." "" _a "${_cc}")
        if(_a GREATER_EQUAL 80)  # the kernels need sm_80's bf16 mma.sync
          list(APPEND _gpu_archs "${_a}-real")
        endif()
      endforeach()
      list(REMOVE_DUPLICATES _gpu_archs)
    endif()
    if(_gpu_archs)
      set(ATTNSCOPE_GPU_AT_CONFIGURE ON)
    else()
      set(ATTNSCOPE_GPU_AT_CONFIGURE OFF)
    endif()
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # Each architecture compiles every CUDA unit again: only the GPUs present, or sm_90 alone where
      # there is none (the ptxas tests still check sm_90 there; gpu-check.sh checks every arch).
      if(_gpu_archs)
        set(CMAKE_CUDA_ARCHITECTURES "${_gpu_archs}")
      else()
        set(CMAKE_CUDA_ARCHITECTURES "90-real")
      endif()
    endif()
    enable_language(CUDA)
    # CMake 3.25 (Debian 12) does not know nvcc's C++20 flag; nvcc has had it since 12.0.
    if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    endif()
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(ATTNSCOPE_HAS_CUDA ON)
    message(STATUS "attnscope: CUDA ${CMAKE_CUDA_COMPILER_VERSION}, architectures ${CMAKE_CUDA_ARCHITECTURES}")
  else()
    message(STATUS "attnscope: no CUDA compiler found, GPU backends are stubs (\"not compiled\")")
  endif()
else()
  message(STATUS "attnscope: CUDA disabled (ATTNSCOPE_CUDA=OFF), GPU backends are stubs")
endif()

# A family's list option (head dims, dtypes): AUTO becomes every value ("") on a machine with a GPU and
# `without_gpu` without one (ATTNSCOPE_GPU_AT_CONFIGURE); any other value is taken as given.
function(attnscope_resolve_auto option without_gpu out)
  set(_v "${${option}}")
  if(_v STREQUAL "AUTO")
    if(ATTNSCOPE_GPU_AT_CONFIGURE)
      set(_v "")
    else()
      set(_v "${without_gpu}")
      message(STATUS "attnscope: ${option}=AUTO: ${without_gpu} only (no GPU at configure time; pass \"\" for all)")
    endif()
  endif()
  set(${out} "${_v}" PARENT_SCOPE)
endfunction()
