/*
 * unicode.c: code point classes and UTF-8 (see unicode.h).
 */
#include "unicode.h"

#include "unicode_tables.h"

unsigned bt_ucd_flags(uint32_t cp)
{
    if (cp < 256)
        return bt_ucd_latin1[cp];
    /* Last range whose lo <= cp. */
    int lo = 0, hi = BT_UCD_N_RANGES - 1, found = -1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        if (bt_ucd_ranges[mid][0] <= cp) {
            found = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    if (found < 0 || cp > (bt_ucd_ranges[found][1] & 0xFFFFFFu))
        return 0;
    return bt_ucd_ranges[found][1] >> 24;
}

const char *bt_ucd_version(void)
{
    return BT_UCD_VERSION;
}

/* Expected length of a sequence led by b (0: b cannot lead) and the range
 * its second byte must lie in (excludes overlongs, surrogates, > U+10FFFF). */
static int lead_info(uint8_t b, uint8_t *lo2, uint8_t *hi2)
{
    *lo2 = 0x80;
    *hi2 = 0xBF;
    if (b < 0x80)
        return 1;
    if (b < 0xC2)
        return 0;
    if (b < 0xE0)
        return 2;
    if (b < 0xF0) {
        if (b == 0xE0)
            *lo2 = 0xA0;
        else if (b == 0xED)
            *hi2 = 0x9F;
        return 3;
    }
    if (b < 0xF5) {
        if (b == 0xF0)
            *lo2 = 0x90;
        else if (b == 0xF4)
            *hi2 = 0x8F;
        return 4;
    }
    return 0;
}

int bt_utf8_decode(const char *s, size_t n, uint32_t *cp)
{
    const uint8_t *u = (const uint8_t *)s;
    uint8_t lo2, hi2;
    int len = lead_info(u[0], &lo2, &hi2);
    if (len == 1) {
        *cp = u[0];
        return 1;
    }
    if (len == 0 || n < (size_t)len || u[1] < lo2 || u[1] > hi2)
        goto invalid;
    for (int i = 2; i < len; i++)
        if ((u[i] & 0xC0) != 0x80)
            goto invalid;
    if (len == 2)
        *cp = ((uint32_t)(u[0] & 0x1F) << 6) | (u[1] & 0x3F);
    else if (len == 3)
        *cp = ((uint32_t)(u[0] & 0x0F) << 12) | ((uint32_t)(u[1] & 0x3F) << 6) | (u[2] & 0x3F);
    else
        *cp = ((uint32_t)(u[0] & 0x07) << 18) | ((uint32_t)(u[1] & 0x3F) << 12) |
              ((uint32_t)(u[2] & 0x3F) << 6) | (u[3] & 0x3F);
    return len;
invalid:
    *cp = BT_UCD_REPLACEMENT;
    return 1;
}

int bt_utf8_encode(uint32_t cp, char out[4])
{
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        cp = BT_UCD_REPLACEMENT;
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t bt_utf8_complete_prefix(const char *s, size_t n)
{
    const uint8_t *u = (const uint8_t *)s;
    /* Only the last sequence can be incomplete: find its lead byte among
     * the last 3 bytes. */
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        size_t p = n - back;
        if ((u[p] & 0xC0) == 0x80)
            continue; /* continuation: look further back */
        uint8_t lo2, hi2;
        int len = lead_info(u[p], &lo2, &hi2);
        if (len <= 1 || back >= (size_t)len)
            return n; /* ASCII, invalid lead, or the sequence is complete */
        if (back >= 2 && (u[p + 1] < lo2 || u[p + 1] > hi2))
            return n; /* can never become valid */
        return p;     /* valid so far, needs more bytes */
    }
    return n;
}

size_t bt_utf8_repair(const char *s, size_t n, char *out)
{
    size_t m = 0;
    for (size_t k = 0; k < n;) {
        uint32_t cp;
        k += (size_t)bt_utf8_decode(s + k, n - k, &cp);
        m += (size_t)bt_utf8_encode(cp, out + m);
    }
    return m;
}
