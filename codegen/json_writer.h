/* A small streaming JSON writer: keys and values in order, commas and escaping
 * handled, so every report and artifact writes valid JSON without string pasting. */
#ifndef VP_JSON_WRITER_H
#define VP_JSON_WRITER_H

#include <stdint.h>
#include <stdio.h>

typedef struct vp_json {
    FILE *f;
    int depth;
    int need_comma[64]; /* per nesting level: an element was written */
    int after_key;
    int pretty;
} vp_json;

void vp_json_init(vp_json *j, FILE *f, int pretty);
void vp_json_begin_object(vp_json *j);
void vp_json_end_object(vp_json *j);
void vp_json_begin_array(vp_json *j);
void vp_json_end_array(vp_json *j);
void vp_json_key(vp_json *j, const char *key);
void vp_json_string(vp_json *j, const char *s);
void vp_json_int(vp_json *j, int64_t v);
void vp_json_double(vp_json *j, double v); /* non-finite values become null */
void vp_json_bool(vp_json *j, int v);
void vp_json_null(vp_json *j);
/* Ends the document with a newline. */
void vp_json_finish(vp_json *j);

#endif
