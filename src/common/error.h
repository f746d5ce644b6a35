/* Error reporting used by every library function.
 *
 * Convention (the one of include/turbospark.h): a function that can fail returns an int status
 * (0 = success, -1 = failure) and, on failure, writes one sentence a user can
 * act on into the caller's buffer (err, errlen). err may be NULL. */
#ifndef TS_COMMON_ERROR_H
#define TS_COMMON_ERROR_H

#include <stddef.h>

#if defined(__GNUC__)
#define TS_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define TS_PRINTF(a, b)
#endif

/* ts_errf (a sentence into err, returns -1): include/turbospark.h. */
#include "turbospark.h"

#endif
