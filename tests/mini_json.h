/* A minimal JSON reader for test fixtures (meta.json, loss curves). */
#ifndef VP_MINI_JSON_H
#define VP_MINI_JSON_H

typedef enum { MJ_NULL, MJ_BOOL, MJ_NUMBER, MJ_STRING, MJ_ARRAY, MJ_OBJECT } mj_type;

typedef struct mj {
    mj_type type;
    double num;
    char *str;        /* string value, or the key of an object member */
    char *key;
    int n;
    struct mj *items; /* array elements or object members */
} mj;

/* Parses text; returns NULL on a syntax error. */
mj *mj_parse(const char *text);
mj *mj_parse_file(const char *path);
void mj_free(mj *v);
const mj *mj_get(const mj *obj, const char *key); /* NULL when absent */

#endif
