# flashinfer.prefill_sm90 (PLACEHOLDER, being written): sources of the Hopper backend.
target_sources(attnscope_flashinfer PRIVATE ${CMAKE_CURRENT_LIST_DIR}/fi_prefill_sm90.cu)
