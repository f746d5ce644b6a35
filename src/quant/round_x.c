/* The tensor-core GEMV's rounding of an activation, on the host (see quant.h). */
#include "quant/quant.h"

#include "common/half.h"

#include <math.h>
#include <string.h>

int64_t ts_tc_x_group(uint32_t type) {
    switch (type) {
    case TS_TYPE_Q4_K:
    case TS_TYPE_Q5_K:
    case TS_TYPE_Q6_K:
        return 256;
    case TS_TYPE_Q8_0:
    case TS_TYPE_Q5_0:
        return 128;
    default:
        return 0;
    }
}

void ts_round_x_like_tc(const float *x, int64_t n, int64_t G, float *out) {
    for (int64_t b = 0; b < n; b += G) {
        float amax = 0;
        for (int64_t i = 0; i < G; i++) amax = fmaxf(amax, fabsf(x[b + i]));
        uint32_t bits;
        memcpy(&bits, &amax, sizeof bits);
        int e = (int)((bits >> 23) & 0xFF);  /* biased exponent of the group's max|x| */
        e = e < 15 ? 15 : e > 254 ? 254 : e; /* 2^s and 2^-s both normal (tc_x_scale) */
        const float scale = ldexpf(1.0f, 141 - e), inv = ldexpf(1.0f, e - 141); /* s = 14 − (e − 127) */
        for (int64_t i = 0; i < G; i++) out[b + i] = ts_fp16_to_fp32(ts_fp32_to_fp16(x[b + i] * scale)) * inv;
    }
}
