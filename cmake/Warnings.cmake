# Warnings for our own targets, and bit-reproducible host arithmetic: no FMA contraction, so the
# input generator and the CPU backends round the same way on every x86-64 host.
function(attnscope_compile_options target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers -ffp-contract=off>)
endfunction()
