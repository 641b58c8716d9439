/* Proleptic Gregorian dates and day counts from 1970-01-01 (Howard Hinnant's algorithms), for the
 * compiled modules that read or write times (native/_ray_json_wire.c, native/_ray_json_encode.c,
 * native/_span_json.c, native/_posted_events.c, native/_state_fold.c): any day count, those before 1970 included. */

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

/* An RFC 3339 UTC time as ray_json_decode._TIMESTAMP reads it (YYYY-MM-DDTHH:MM:SS[.f{1,9}]Z) and
 * datetime accepts (a real date, hours to 23, seconds to 59): 0 and the seconds since the epoch and
 * nanoseconds, or -1 for any other text. */
static inline int rfc3339_digits(const char *p, int n, int *out) {
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') return 0;
        v = v * 10 + (p[i] - '0');
    }
    *out = v;
    return 1;
}

static inline int rfc3339_utc(const char *p, int64_t n, int64_t *seconds, int *nanos_out) {
    int year, month, day, hour, minute, second, nanos = 0;
    if (n < 20 || p[4] != '-' || p[7] != '-' || p[10] != 'T' || p[13] != ':' || p[16] != ':' ||
        p[n - 1] != 'Z' || !rfc3339_digits(p, 4, &year) || !rfc3339_digits(p + 5, 2, &month) ||
        !rfc3339_digits(p + 8, 2, &day) || !rfc3339_digits(p + 11, 2, &hour) ||
        !rfc3339_digits(p + 14, 2, &minute) || !rfc3339_digits(p + 17, 2, &second)) {
        return -1;
    }
    if (n > 20) { /* a fraction of 1 to 9 digits */
        int64_t k = n - 21;
        if (p[19] != '.' || k < 1 || k > 9 || !rfc3339_digits(p + 20, (int)k, &nanos)) return -1;
        for (int64_t i = k; i < 9; i++) nanos *= 10;
    }
    static const int month_days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    if (year < 1 || month < 1 || month > 12 || day < 1 ||
        day > month_days[month - 1] + (month == 2 && leap) || hour > 23 || minute > 59 || second > 59) {
        return -1;
    }
    *seconds = days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second;
    *nanos_out = nanos;
    return 0;
}

#endif
