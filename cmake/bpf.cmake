# Compiles a BPF C source with clang (-target bpf -O2 -g, BTF kept) and
# generates its libbpf skeleton with bpftool.
#   rg_bpf_object(NAME name SOURCE file.bpf.c [DEPENDS headers...])
# gives an INTERFACE target <name>_skel whose include directory holds
# <name>.skel.h, and the object at ${CMAKE_CURRENT_BINARY_DIR}/<name>.bpf.o.
find_program(CLANG_BPF NAMES clang clang-14 REQUIRED)
find_program(BPFTOOL NAMES bpftool PATHS /usr/sbin /sbin REQUIRED)

function(rg_bpf_object)
  cmake_parse_arguments(ARG "" "NAME;SOURCE" "DEPENDS" ${ARGN})
  set(obj ${CMAKE_CURRENT_BINARY_DIR}/${ARG_NAME}.bpf.o)
  set(skel ${CMAKE_CURRENT_BINARY_DIR}/${ARG_NAME}.skel.h)
  execute_process(COMMAND uname -m OUTPUT_VARIABLE arch OUTPUT_STRIP_TRAILING_WHITESPACE)
  # uapi headers only (no vmlinux.h); asm/ lives in the multiarch directory.
  add_custom_command(
    OUTPUT ${obj}
    COMMAND ${CLANG_BPF} -target bpf -O2 -g -Wall -Werror
            -D__BPF__ -D__TARGET_ARCH_x86
            -I${PROJECT_SOURCE_DIR}/include -I${PROJECT_SOURCE_DIR}/bpf
            -I/usr/include/${arch}-linux-gnu
            -c ${CMAKE_CURRENT_SOURCE_DIR}/${ARG_SOURCE} -o ${obj}
    DEPENDS ${ARG_SOURCE} ${ARG_DEPENDS}
    COMMENT "BPF ${ARG_NAME}.bpf.o"
    VERBATIM)
  add_custom_command(
    OUTPUT ${skel}
    COMMAND ${BPFTOOL} gen skeleton ${obj} name ${ARG_NAME} > ${skel}
    DEPENDS ${obj}
    COMMENT "skeleton ${ARG_NAME}.skel.h"
    VERBATIM)
  add_custom_target(${ARG_NAME}_bpf DEPENDS ${obj} ${skel})
  add_library(${ARG_NAME}_skel INTERFACE)
  add_dependencies(${ARG_NAME}_skel ${ARG_NAME}_bpf)
  target_include_directories(${ARG_NAME}_skel INTERFACE
    ${CMAKE_CURRENT_BINARY_DIR} ${PROJECT_SOURCE_DIR}/include)
  target_link_libraries(${ARG_NAME}_skel INTERFACE PkgConfig::LIBBPF)
  set(${ARG_NAME}_OBJECT ${obj} PARENT_SCOPE)
endfunction()
