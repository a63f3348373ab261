/* json: the one JSON string writer every module uses (records' JSON columns, --json
 * outputs, policy params), so that escaping cannot drift between them.
 *
 * json_write_str writes s as a JSON string: '"' and '\' escaped, control characters as
 * \u00XX, every other byte as is (UTF-8 passes through). */
#ifndef TWIN_JSON_H
#define TWIN_JSON_H

#include <stdio.h>

void json_write_str(FILE *f, const char *s);

#endif
