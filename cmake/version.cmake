# Run at every build (cmake -P): writes the git commit of the source tree into OUT, rewriting the
# file only when the commit changes so that nothing rebuilds for nothing.
#   -DSRC_DIR=... -DOUT=...
set(commit unknown)
find_program(GIT git)
if(GIT)
  execute_process(COMMAND ${GIT} -C ${SRC_DIR} rev-parse --short=12 HEAD OUTPUT_VARIABLE c
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE r)
  if(r EQUAL 0 AND NOT c STREQUAL "")
    set(commit ${c})
    execute_process(COMMAND ${GIT} -C ${SRC_DIR} diff --quiet HEAD -- RESULT_VARIABLE dirty ERROR_QUIET)
    if(NOT dirty EQUAL 0)
      string(APPEND commit "-dirty")
    endif()
  endif()
endif()
file(WRITE ${OUT}.tmp "/* written by cmake/version.cmake at build time */\n#define TS_GIT_COMMIT \"${commit}\"\n")
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)
file(REMOVE ${OUT}.tmp)
