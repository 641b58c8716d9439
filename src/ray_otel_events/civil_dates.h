/* Proleptic Gregorian dates and day counts from 1970-01-01 (Howard Hinnant's algorithms), for the
 * compiled modules that read or write times (encoding/_ray_json_wire.c, encoding/_ray_json_encode.c,
 * otel/_span_json.c, store/_state_fold.c): any day count, those before 1970 included. */

#ifndef RAY_OTEL_EVENTS_CIVIL_DATES_H
#define RAY_OTEL_EVENTS_CIVIL_DATES_H

#include <stdint.h>

/* The date of a day count. */
static inline void civil_from_days(int64_t days, int64_t *year, int *month, int *day) {
    days += 719468;
    int64_t era = (days >= 0 ? days : days - 146096) / 146097;
    int64_t doe = days - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    *day = (int)(doy - (153 * mp + 2) / 5 + 1);
    *month = (int)(mp < 10 ? mp + 3 : mp - 9);
    *year = yoe + era * 400 + (*month <= 2);
}

/* The day count of a date. */
static inline int64_t days_from_civil(int64_t y, int64_t m, int64_t d) {
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

#endif
