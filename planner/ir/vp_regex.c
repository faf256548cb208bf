/* A user's regular expression bounded before regcomp (vp_regex.h). */
#include "ir/vp_regex.h"

#include <stdlib.h>
#include <string.h>

/* What regcomp will build, measured on the text: the deepest group nesting, and the
 * pattern's size once bounded repetitions are expanded (glibc copies an atom n times
 * for {n}, so ((a{255}){255}){255} is 16 million nodes: 13 s and 3.4 GB).  An atom is a
 * character, an escape, a bracket expression or a group; a group's size is the sum of
 * its alternatives'; {m}, {m,} and {m,n} multiply the atom before them by n (or m + 1).
 * Sizes saturate, so no pattern overflows them. */
typedef struct measure {
    int depth;
    double expanded;
} measure;

#define REGEX_LEVELS (VP_REGEX_MAX_DEPTH + 2)

static const char *skip_bracket(const char *p) { /* p at '[': past the matching ']' */
    p++;
    if (*p == '^') p++;
    if (*p == ']') p++;
    while (*p && *p != ']') {
        if (*p == '[' && (p[1] == ':' || p[1] == '.' || p[1] == '=')) {
            char close = p[1];
            p += 2;
            while (*p && !(*p == close && p[1] == ']')) p++;
            if (*p) p += 2;
        } else {
            p++;
        }
    }
    return *p ? p + 1 : p;
}

static measure measure_of(const char *p) {
    double total[REGEX_LEVELS] = {0}, last[REGEX_LEVELS] = {0}; /* per open group: size so far, last atom's */
    int depth = 0, max = 0;
    while (*p) {
        double atom = 0;
        if (*p == '\\') {
            p += p[1] ? 2 : 1;
            atom = 1;
        } else if (*p == '[') {
            p = skip_bracket(p);
            atom = 1;
        } else if (*p == '(') {
            p++;
            if (++depth > max) max = depth;
            if (depth < REGEX_LEVELS) total[depth] = last[depth] = 0;
            continue;
        } else if (*p == ')') {
            p++;
            if (depth > 0) {
                atom = depth < REGEX_LEVELS ? total[depth] : 1e18;
                depth--;
            } else {
                atom = 1;
            }
        } else if (*p == '{') {
            char *end;
            double m = strtod(p + 1, &end), n = m;
            if (*end == ',') n = end[1] == '}' ? m + 1 : strtod(end + 1, &end);
            else if (*end != '}') n = 1;
            while (*p && *p != '}') p++;
            if (*p) p++;
            if (n < 1) n = 1;
            int d = depth < REGEX_LEVELS ? depth : REGEX_LEVELS - 1;
            double grown = last[d] * n;
            total[d] += grown - last[d];
            if (total[d] > 1e18) total[d] = 1e18;
            last[d] = grown > 1e18 ? 1e18 : grown;
            continue;
        } else {
            atom = *p == '|' || *p == '*' || *p == '+' || *p == '?' || *p == '^' || *p == '$' ? 0 : 1;
            p++;
        }
        int d = depth < REGEX_LEVELS ? depth : REGEX_LEVELS - 1;
        total[d] += atom;
        if (total[d] > 1e18) total[d] = 1e18;
        if (atom > 0) last[d] = atom;
    }
    return (measure){max, total[0]};
}

vp_status vp_regex_compile(regex_t *re, const char *pattern, const char *option, vp_error *err) {
    size_t len = strlen(pattern);
    if (len > VP_REGEX_MAX_LEN)
        return vp_fail(err, VP_ERR_USAGE, "%s: the regular expression is %zu bytes long (at most %d): '%.64s...'",
                       option, len, VP_REGEX_MAX_LEN, pattern);
    measure m = measure_of(pattern);
    if (m.depth > VP_REGEX_MAX_DEPTH)
        return vp_fail(err, VP_ERR_USAGE, "%s: the regular expression nests groups %d deep (at most %d): '%.64s%s'",
                       option, m.depth, VP_REGEX_MAX_DEPTH, pattern, len > 64 ? "..." : "");
    if (m.expanded > VP_REGEX_MAX_EXPANDED)
        return vp_fail(err, VP_ERR_USAGE,
                       "%s: the regular expression's repetitions expand it to %.3g atoms (at most %d): '%.64s%s'", option,
                       m.expanded, VP_REGEX_MAX_EXPANDED, pattern, len > 64 ? "..." : "");
    regex_t tmp;
    int rc = regcomp(&tmp, pattern, REG_EXTENDED | REG_NOSUB);
    if (rc) {
        char msg[256];
        regerror(rc, &tmp, msg, sizeof msg);
        return vp_fail(err, VP_ERR_USAGE, "%s '%.200s' is not a valid regular expression: %s", option, pattern, msg);
    }
    *re = tmp;
    return VP_OK;
}
