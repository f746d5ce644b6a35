/* The version of the public API (include/turbospark.h): the CMake project version and the git
 * commit of the sources, written into ts_git_commit.h at build time by cmake/version.cmake. */
#include "turbospark.h"

#if defined(__has_include)
#if __has_include("ts_git_commit.h")
#include "ts_git_commit.h"
#endif
#endif
#ifndef TS_GIT_COMMIT
#define TS_GIT_COMMIT "unknown" /* built without CMake */
#endif

#ifndef TS_VERSION
#define TS_VERSION "unknown"
#endif

const char *ts_version(void) {
    return TS_VERSION;
}
const char *ts_build_commit(void) {
    return TS_GIT_COMMIT;
}
