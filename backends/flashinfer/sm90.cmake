# flashinfer.prefill_sm90: FlashInfer's Hopper paged prefill (prefill_sm90.cuh: wgmma, TMA, warp
# specialisation) and its planner PrefillSM90Plan. Included by CMakeLists.txt after the
# attnscope_family_flashinfer target exists.
#
# The kernels need sm_90a (arch-specific: wgmma and setmaxnreg exist on compute capability 9.0
# only), so they live in their own library, attnscope_flashinfer_sm90, compiled with
# -gencode arch=compute_90a,code=sm_90a alone, whatever CMAKE_CUDA_ARCHITECTURES the rest of the
# project builds for. fi_sm90_instances.def is the table; one unit is generated per head dim with
# all of its lines (~100 s of CPU and ~3.8 GB of RAM each).
#
# Built when ATTNSCOPE_FLASHINFER_SM90 is ON (default: ON when nvcc can target sm_90a, CUDA 12.0+)
# and CMAKE_CUDA_ARCHITECTURES asks for 90 in some form; otherwise fi_prefill_sm90.cu alone is
# compiled into attnscope_family_flashinfer, with the reason, and the backend reports "not compiled: <why>".
set(_sm90_dir ${CMAKE_CURRENT_LIST_DIR})
set(_sm90_default ON)
if(CMAKE_CUDA_COMPILER_VERSION VERSION_LESS 12.0)
  set(_sm90_default OFF)
endif()
option(ATTNSCOPE_FLASHINFER_SM90 "Build flashinfer.prefill_sm90 (FlashInfer's Hopper prefill, sm_90a)" ${_sm90_default})
set(ATTNSCOPE_FLASHINFER_SM90_HEAD_DIMS "AUTO" CACHE STRING
    "flashinfer.prefill_sm90 head dims to compile (empty: every line of fi_sm90_instances.def; AUTO: empty with a GPU here, else 128)")
attnscope_resolve_auto(ATTNSCOPE_FLASHINFER_SM90_HEAD_DIMS 128 _sm90_dims)

set(_sm90_why "")
if(NOT ATTNSCOPE_FLASHINFER_SM90)
  if(CMAKE_CUDA_COMPILER_VERSION VERSION_LESS 12.0)
    set(_sm90_why "nvcc ${CMAKE_CUDA_COMPILER_VERSION} cannot target sm_90a (CUDA 12.0 or newer is needed)")
  else()
    set(_sm90_why "disabled at configure time (-DATTNSCOPE_FLASHINFER_SM90=OFF)")
  endif()
elseif(CMAKE_CUDA_COMPILER_VERSION VERSION_LESS 12.0)
  set(_sm90_why "nvcc ${CMAKE_CUDA_COMPILER_VERSION} cannot target sm_90a (CUDA 12.0 or newer is needed)")
elseif(NOT ATTNSCOPE_TARGETS_SM90)  # backends/CMakeLists.txt
  string(REPLACE ";" "," _sm90_archs "${CMAKE_CUDA_ARCHITECTURES}")
  set(_sm90_why "CMAKE_CUDA_ARCHITECTURES=${_sm90_archs} does not include 90 (the sm_90a kernels are built only for a build that targets Hopper)")
endif()

# The table, filtered by ATTNSCOPE_FLASHINFER_SM90_HEAD_DIMS. One generated unit per head dim
# holding all of its lines: FlashInfer's Hopper headers alone cost ~60 s of CPU per unit and a
# kernel ~6-8 s more, so grouping is what keeps the table cheap (fi_sm90_instances.def has the numbers).
set(_sm90_def ${_sm90_dir}/fi_sm90_instances.def)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${_sm90_def})
file(STRINGS ${_sm90_def} _sm90_lines REGEX "^FI_SM90\\(")
set(_sm90_gen_dir ${CMAKE_CURRENT_BINARY_DIR}/fi_sm90)
set(_sm90_kept "// Generated from fi_sm90_instances.def (ATTNSCOPE_FLASHINFER_SM90_HEAD_DIMS=${ATTNSCOPE_FLASHINFER_SM90_HEAD_DIMS}: ${_sm90_dims})\n")
set(_sm90_groups)
set(_sm90_names)
foreach(_line IN LISTS _sm90_lines)
  # dtype e4m3 / e5m2: FlashInfer's FP8 kernel (Q, K, V in FP8, bf16 output; variant plain only)
  if(NOT _line MATCHES "FI_SM90\\(([0-9]+), *(bf16|fp16|e4m3|e5m2), *(plain|softcap), *(causal|none), *(window|nowindow)\\)")
    message(FATAL_ERROR "fi_sm90_instances.def: cannot read '${_line}' (FI_SM90(head_dim, bf16|fp16|e4m3|e5m2, plain|softcap, causal|none, window|nowindow))")
  endif()
  set(_d ${CMAKE_MATCH_1})
  set(_n ${CMAKE_MATCH_2})
  set(_v ${CMAKE_MATCH_3})
  set(_m ${CMAKE_MATCH_4})
  set(_w ${CMAKE_MATCH_5})
  if(_sm90_dims AND NOT _d IN_LIST _sm90_dims)
    continue()
  endif()
  string(APPEND _sm90_kept "FI_SM90(${_d}, ${_n}, ${_v}, ${_m}, ${_w})\n")
  set(_name d${_d}_${_n}_${_v}_${_m}_${_w})
  list(APPEND _sm90_names ${_name})
  set(_g d${_d})
  if(NOT _g IN_LIST _sm90_groups)
    list(APPEND _sm90_groups ${_g})
    set(_sm90_${_g}_body "")
    set(_sm90_${_g}_fp8 OFF)
  endif()
  if(_n STREQUAL "bf16")
    set(_t nv_bfloat16)
  else()
    set(_t half)
  endif()
  if(_v STREQUAL "plain")
    set(_ve FiVariant::kPlain)
  else()
    set(_ve FiVariant::kSoftcap)
  endif()
  if(_m STREQUAL "causal")
    set(_me FiMask::kCausal)
  else()
    set(_me FiMask::kNone)
  endif()
  if(_w STREQUAL "window")
    set(_we true)
  else()
    set(_we false)
  endif()
  if(_n STREQUAL "e4m3" OR _n STREQUAL "e5m2")
    if(NOT _v STREQUAL "plain")
      message(FATAL_ERROR "fi_sm90_instances.def: '${_line}': the FP8 kernel has one variant (DefaultFP8Attention): plain")
    endif()
    set(_sm90_${_g}_fp8 ON)
    string(APPEND _sm90_${_g}_body "Sm90Instance fi_sm90_${_name}() { return sm90::instance_fp8<${_d}, nv_bfloat16, __nv_fp8_${_n}, ${_me}, ${_we}>(); }\n")
  else()
    string(APPEND _sm90_${_g}_body "Sm90Instance fi_sm90_${_name}() { return sm90::instance<${_d}, ${_t}, ${_ve}, ${_me}, ${_we}>(); }\n")
  endif()
endforeach()
set(_sm90_units)
foreach(_g IN LISTS _sm90_groups)
  set(_f ${_sm90_gen_dir}/fi_sm90_${_g}.cu)
  set(_inc "#include \"fi_sm90_kernel.cuh\"")
  if(_sm90_${_g}_fp8)
    string(APPEND _inc "\n#include \"fi_sm90_fp8_kernel.cuh\"  // FlashInfer's FP8 kernel: this unit has FP8 lines")
  endif()
  file(CONFIGURE OUTPUT ${_f} CONTENT
"// Generated from fi_sm90_instances.def: the flashinfer.prefill_sm90 kernels of ${_g}.
${_inc}
namespace attnscope::peers::flashinfer {
${_sm90_${_g}_body}}  // namespace attnscope::peers::flashinfer
")
  list(APPEND _sm90_units ${_f})
endforeach()
if(NOT _sm90_why AND NOT _sm90_units)
  set(_sm90_why "ATTNSCOPE_FLASHINFER_SM90_HEAD_DIMS=${ATTNSCOPE_FLASHINFER_SM90_HEAD_DIMS} keeps no line of fi_sm90_instances.def")
endif()

if(_sm90_why)
  # The backend alone, saying why it is not compiled.
  target_sources(attnscope_family_flashinfer PRIVATE ${_sm90_dir}/fi_prefill_sm90.cu ${_sm90_dir}/fi_mla_sm90.cu)
  set_property(SOURCE ${_sm90_dir}/fi_prefill_sm90.cu ${_sm90_dir}/fi_mla_sm90.cu APPEND PROPERTY COMPILE_DEFINITIONS "ATTNSCOPE_FI_SM90_WHY=\"${_sm90_why}\"")
  message(STATUS "attnscope: flashinfer.prefill_sm90: not compiled (${_sm90_why})")
  return()
endif()

file(CONFIGURE OUTPUT ${_sm90_gen_dir}/fi_sm90_instances_built.def CONTENT "${_sm90_kept}")
add_library(attnscope_flashinfer_sm90 STATIC
  ${_sm90_dir}/fi_prefill_sm90.cu  # the backend (PrefillSM90Plan, buffers, checks, timing) and the table's lookup
  ${_sm90_units}                   # the kernels, one unit per head dim
  ${_sm90_dir}/fi_mla_sm90.cu      # flashinfer.mla_sm90's kernel (mla_hopper.cuh)
)
target_include_directories(attnscope_flashinfer_sm90 BEFORE PRIVATE ${ATTNSCOPE_CCCL_INCLUDE})
target_include_directories(attnscope_flashinfer_sm90 PRIVATE
  ${ATTNSCOPE_FLASHINFER_ROOT}/include
  ${ATTNSCOPE_FLASHINFER_ROOT}/cutlass/include
  ${ATTNSCOPE_FLASHINFER_ROOT}/cutlass/tools/util/include
  ${PROJECT_SOURCE_DIR}/model/include
  ${PROJECT_SOURCE_DIR}/backends/include
  ${PROJECT_SOURCE_DIR}/backends/gpu
  ${_sm90_dir}
  ${_sm90_gen_dir})
target_compile_definitions(attnscope_flashinfer_sm90 PRIVATE ATTNSCOPE_FLASHINFER_PIN="${ATTNSCOPE_FLASHINFER_PIN}")
# CUDA_ARCHITECTURES OFF: CMake adds no architecture flags; the one -gencode below is all. The
# other flags are FlashInfer's own JIT flags for sm90a modules (jit/core.py: sm90a_nvcc_flags,
# -use_fast_math, --expt-relaxed-constexpr), so the kernels compute as FlashInfer's builds do.
set_target_properties(attnscope_flashinfer_sm90 PROPERTIES
  CUDA_ARCHITECTURES OFF
  CUDA_SEPARABLE_COMPILATION OFF
  POSITION_INDEPENDENT_CODE ON)
target_compile_options(attnscope_flashinfer_sm90 PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:-gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -use_fast_math
  -DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED -w>)
target_link_libraries(attnscope_flashinfer_sm90 PUBLIC attnscope_gpu_runtime CUDA::cudart)
target_link_libraries(attnscope_family_flashinfer PRIVATE attnscope_flashinfer_sm90)
string(REPLACE ";" ", " _sm90_names_text "${_sm90_names}")
message(STATUS "attnscope: flashinfer.prefill_sm90: sm_90a, kernels: ${_sm90_names_text}")
