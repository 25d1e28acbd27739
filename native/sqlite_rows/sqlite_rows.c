/* gs_int64_rows: a SQLite table-valued function over a packed array of int64 rows.
 *
 *   INSERT INTO t(a, b, c) SELECT c0, c1, c2 FROM gs_int64_rows(?1, 3)
 *
 * with ?1 a blob of rows * ncols little-endian int64 values, row-major (a
 * numpy int64 array's bytes). One statement and one bound value per batch:
 * the recorder's writer stores its rows without making a Python object per
 * value or binding each one (gpuscope.store.writer), and SQLite runs the
 * whole batch without the interpreter's lock.
 *
 * Columns c0..c31 (at most 32 a row); reading a column past ncols is NULL. A
 * blob whose size is not a whole number of rows is an error, never a partial
 * read. The blob is copied at the start of each scan, so the rows stay valid
 * whatever the caller does with the bound value meanwhile.
 */
#include <sqlite3ext.h>
SQLITE_EXTENSION_INIT1

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define GS_MAX_COLS 32
#define GS_COL_DATA GS_MAX_COLS
#define GS_COL_NCOLS (GS_MAX_COLS + 1)

typedef struct {
	sqlite3_vtab base;
} gs_vtab;

typedef struct {
	sqlite3_vtab_cursor base;
	int64_t *data;
	sqlite3_int64 rows;
	sqlite3_int64 row;
	int ncols;
} gs_cursor;

static int gs_connect(sqlite3 *db, void *aux, int argc, const char *const *argv, sqlite3_vtab **out, char **err)
{
	char schema[512];
	int n = 0, i, rc;
	gs_vtab *v;

	(void)aux;
	(void)argc;
	(void)argv;
	(void)err;
	n += snprintf(schema + n, sizeof(schema) - n, "CREATE TABLE x(");
	for (i = 0; i < GS_MAX_COLS; i++)
		n += snprintf(schema + n, sizeof(schema) - n, "c%d,", i);
	snprintf(schema + n, sizeof(schema) - n, "data HIDDEN, ncols HIDDEN)");
	rc = sqlite3_declare_vtab(db, schema);
	if (rc != SQLITE_OK)
		return rc;
	v = sqlite3_malloc(sizeof(*v));
	if (!v)
		return SQLITE_NOMEM;
	memset(v, 0, sizeof(*v));
	*out = &v->base;
	return SQLITE_OK;
}

static int gs_disconnect(sqlite3_vtab *v)
{
	sqlite3_free(v);
	return SQLITE_OK;
}

/* Both arguments are required, as equality constraints (a table-valued function's call). */
static int gs_best_index(sqlite3_vtab *v, sqlite3_index_info *info)
{
	int data = -1, ncols = -1, i;

	(void)v;
	for (i = 0; i < info->nConstraint; i++) {
		const struct sqlite3_index_constraint *c = &info->aConstraint[i];
		if (c->op != SQLITE_INDEX_CONSTRAINT_EQ)
			continue;
		if (c->iColumn == GS_COL_DATA) {
			if (!c->usable)
				return SQLITE_CONSTRAINT;
			data = i;
		} else if (c->iColumn == GS_COL_NCOLS) {
			if (!c->usable)
				return SQLITE_CONSTRAINT;
			ncols = i;
		}
	}
	if (data < 0 || ncols < 0) {
		sqlite3_free(v->zErrMsg);
		v->zErrMsg = sqlite3_mprintf("gs_int64_rows takes two arguments: a blob and its columns per row");
		return SQLITE_ERROR;
	}
	info->aConstraintUsage[data].argvIndex = 1;
	info->aConstraintUsage[data].omit = 1;
	info->aConstraintUsage[ncols].argvIndex = 2;
	info->aConstraintUsage[ncols].omit = 1;
	info->estimatedCost = 1.0;
	info->idxNum = 1;
	return SQLITE_OK;
}

static int gs_open(sqlite3_vtab *v, sqlite3_vtab_cursor **out)
{
	gs_cursor *c = sqlite3_malloc(sizeof(*c));

	(void)v;
	if (!c)
		return SQLITE_NOMEM;
	memset(c, 0, sizeof(*c));
	*out = &c->base;
	return SQLITE_OK;
}

static int gs_close(sqlite3_vtab_cursor *cur)
{
	gs_cursor *c = (gs_cursor *)cur;

	sqlite3_free(c->data);
	sqlite3_free(c);
	return SQLITE_OK;
}

static int gs_filter(sqlite3_vtab_cursor *cur, int idx, const char *idx_str, int argc, sqlite3_value **argv)
{
	gs_cursor *c = (gs_cursor *)cur;
	sqlite3_int64 ncols, bytes;
	const void *blob;

	(void)idx;
	(void)idx_str;
	sqlite3_free(c->data);
	c->data = NULL;
	c->rows = c->row = 0;
	if (argc != 2 || sqlite3_value_type(argv[1]) != SQLITE_INTEGER)
		goto bad;
	ncols = sqlite3_value_int64(argv[1]);
	if (ncols < 1 || ncols > GS_MAX_COLS)
		goto bad;
	if (sqlite3_value_type(argv[0]) == SQLITE_NULL)
		return SQLITE_OK; /* no rows */
	if (sqlite3_value_type(argv[0]) != SQLITE_BLOB)
		goto bad;
	blob = sqlite3_value_blob(argv[0]);
	bytes = sqlite3_value_bytes(argv[0]);
	if (bytes % (ncols * 8))
		goto bad;
	c->ncols = (int)ncols;
	c->rows = bytes / (ncols * 8);
	if (c->rows) {
		c->data = sqlite3_malloc64(bytes);
		if (!c->data)
			return SQLITE_NOMEM;
		memcpy(c->data, blob, bytes);
	}
	return SQLITE_OK;
bad:
	sqlite3_free(cur->pVtab->zErrMsg);
	cur->pVtab->zErrMsg = sqlite3_mprintf("gs_int64_rows: a blob of whole rows of 8-byte integers, and 1-%d columns",
					      GS_MAX_COLS);
	return SQLITE_ERROR;
}

static int gs_next(sqlite3_vtab_cursor *cur)
{
	((gs_cursor *)cur)->row++;
	return SQLITE_OK;
}

static int gs_eof(sqlite3_vtab_cursor *cur)
{
	gs_cursor *c = (gs_cursor *)cur;

	return c->row >= c->rows;
}

static int gs_column(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int col)
{
	gs_cursor *c = (gs_cursor *)cur;

	if (col < c->ncols)
		sqlite3_result_int64(ctx, c->data[c->row * c->ncols + col]);
	else
		sqlite3_result_null(ctx);
	return SQLITE_OK;
}

static int gs_rowid(sqlite3_vtab_cursor *cur, sqlite3_int64 *rowid)
{
	*rowid = ((gs_cursor *)cur)->row + 1;
	return SQLITE_OK;
}

static sqlite3_module gs_module = {
	.iVersion = 0,
	.xCreate = NULL, /* eponymous only: there is no CREATE VIRTUAL TABLE of it */
	.xConnect = gs_connect,
	.xBestIndex = gs_best_index,
	.xDisconnect = gs_disconnect,
	.xDestroy = gs_disconnect,
	.xOpen = gs_open,
	.xClose = gs_close,
	.xFilter = gs_filter,
	.xNext = gs_next,
	.xEof = gs_eof,
	.xColumn = gs_column,
	.xRowid = gs_rowid,
};

__attribute__((visibility("default"))) int sqlite3_gpuscopesqliterows_init(sqlite3 *db, char **err,
								      const sqlite3_api_routines *api)
{
	(void)err;
	SQLITE_EXTENSION_INIT2(api);
	return sqlite3_create_module(db, "gs_int64_rows", &gs_module, NULL);
}
