/* The library's own use of the public JSON string check (include/turbospark.h, "JSON text: strings
 * checked before cJSON reads them"): the functions that read JSON text with cJSON and take no NUL. */
#ifndef TS_COMMON_JSON_CHECK_H
#define TS_COMMON_JSON_CHECK_H

#include "turbospark.h"

#include <stddef.h>

/* For a library function that reads JSON text with cJSON and takes no NUL: 0 when text[0..n) is
 * fine, else −1 with "WHAT: <the sentence>" in err. */
int ts_json_check_text(const char *what, const char *text, size_t n, const char *who, char *err,
                       size_t errlen);

#endif
