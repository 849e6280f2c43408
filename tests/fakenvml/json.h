/* Minimal JSON reader for the fake NVIDIA libraries (no third-party code). */
#ifndef FAKE_JSON_H
#define FAKE_JSON_H

#include <stdbool.h>
#include <stddef.h>

#pragma GCC visibility push(hidden)

typedef enum {
    JSON_NULL,
    JSON_BOOL,
    JSON_NUMBER,
    JSON_STRING,
    JSON_ARRAY,
    JSON_OBJECT,
} json_type;

typedef struct json_value json_value;

struct json_value {
    json_type type;
    bool boolean;        /* JSON_BOOL */
    double number;       /* JSON_NUMBER */
    char *string;        /* JSON_STRING (NUL-terminated, UTF-8) */
    size_t count;        /* JSON_ARRAY / JSON_OBJECT: number of items */
    json_value **items;  /* JSON_ARRAY / JSON_OBJECT: the values */
    char **keys;         /* JSON_OBJECT: the member names */
};

/* Parses a whole document. On failure returns NULL and writes a message
 * ("line 3: expected ':'") into err. */
json_value *json_parse(const char *text, char *err, size_t errlen);

void json_free(json_value *value);

/* Member of an object, or NULL if absent (or if obj is not an object). */
const json_value *json_get(const json_value *obj, const char *key);

const char *json_type_name(json_type type);

#pragma GCC visibility pop

#endif
