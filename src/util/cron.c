/*-------------------------------------------------------------------------
 *
 * cron.c
 *	  Cron expressions and time zones for schedules: parsing five-field
 *	  expressions (and the @hourly-style shorthands), and the next fire time
 *	  after an instant in a named time zone.
 *
 * Pure computation: nothing here reads tables, settings or SPI; it uses
 * PostgreSQL's own time zone code (pgtime.h: pg_tzset, pg_localtime) and
 * Julian day arithmetic (datetime.h).  Errors are raised with ereport: a
 * malformed expression is 22023 with a detail naming the field and the
 * position (1-based, in characters) of what is wrong.
 *
 * The fields are matched against local wall-clock time in the schedule's
 * zone.  At a daylight-saving change a local time that does not exist (the
 * hour the clocks skip) is skipped, and a local time that happens twice
 * (the hour they repeat) fires once, at its first occurrence: a candidate
 * local time is resolved to the earliest instant that shows it, and one
 * whose earliest instant is not after the given instant has already fired.
 *
 * Day of month and day of week follow Vixie cron: when both are restricted
 * (neither starts with "*"), a day matching either fires; otherwise both
 * must match.  Day of week 0 and 7 are Sunday.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <ctype.h>

#include "datatype/timestamp.h"
#include "pgtime.h"
#include "utils/datetime.h"
#include "utils/timestamp.h"

#include "util/util.h"

/* the fields: their names, ranges and the names their values may have */
typedef struct CronField
{
	const char *name;
	int			min;
	int			max;
	const char *const *names;	/* names of min, min + 1, ...; or NULL */
} CronField;

static const char *const month_names[] = {
	"jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec", NULL
};
static const char *const day_names[] = {
	"sun", "mon", "tue", "wed", "thu", "fri", "sat", NULL
};

static const CronField fields[5] = {
	{"minute", 0, 59, NULL},
	{"hour", 0, 23, NULL},
	{"day of month", 1, 31, NULL},
	{"month", 1, 12, month_names},
	{"day of week", 0, 7, day_names},
};

/* the shorthands */
static const struct
{
	const char *name;
	const char *expr;
}			shorthands[] = {
	{"@yearly", "0 0 1 1 *"},
	{"@annually", "0 0 1 1 *"},
	{"@monthly", "0 0 1 * *"},
	{"@weekly", "0 0 * * 0"},
	{"@daily", "0 0 * * *"},
	{"@midnight", "0 0 * * *"},
	{"@hourly", "0 * * * *"},
};

/* what a parse error reports */
typedef struct CronParse
{
	const char *expr;			/* as given */
	const char *text;			/* what is parsed (the shorthand's expansion) */
	int			offset;			/* of text in expr: positions are expr's */
} CronParse;

static void pg_attribute_noreturn()
cron_error(const CronParse *p, int field, const char *at, const char *msg)
{
	int			pos = p->text == p->expr ? (int) (at - p->text) + 1 : 1;

	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid cron expression \"%s\"", p->expr),
			 field >= 0 ?
			 errdetail("Field %d (%s) at position %d: %s.", field + 1, fields[field].name, pos, msg) :
			 errdetail("%s.", msg),
			 errhint("A cron expression has five fields: minute (0-59), hour (0-23), day of month (1-31), month (1-12 or JAN-DEC), day of week (0-7 or SUN-SAT, 0 and 7 are Sunday); each a list of *, values, ranges a-b and steps */n or a-b/n; or one of @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly.")));
}

/*
 * A value of field f at *s: a number or a name; *s moves past it.
 */
static int
parse_value(const CronParse *p, int f, const char **s)
{
	const char *start = *s;
	const CronField *fd = &fields[f];

	if (isdigit((unsigned char) **s))
	{
		int			v = 0;

		while (isdigit((unsigned char) **s))
		{
			if (v < 1000)
				v = v * 10 + (**s - '0');
			(*s)++;
		}
		if (v < fd->min || v > fd->max)
			cron_error(p, f, start,
					   psprintf("%d is out of range %d-%d", v, fd->min, fd->max));
		return v;
	}
	if (fd->names && isalpha((unsigned char) **s))
	{
		char		word[4];
		int			n = 0;

		while (isalpha((unsigned char) **s))
		{
			if (n < 3)
				word[n] = (char) tolower((unsigned char) **s);
			n++;
			(*s)++;
		}
		word[n < 3 ? n : 3] = '\0';
		if (n == 3)
			for (int i = 0; fd->names[i]; i++)
				if (strcmp(word, fd->names[i]) == 0)
					return fd->min + i;
		cron_error(p, f, start,
				   psprintf("\"%.*s\" is not a %s name", (int) (*s - start), start,
							f == 3 ? "month" : "day"));
	}
	if (**s == '\0' || **s == ',')
		cron_error(p, f, start, "a value is missing");
	cron_error(p, f, start, psprintf("unexpected \"%c\"", **s));
	return 0;					/* not reached */
}

/*
 * One field at text[*pos...]: a comma-separated list of items; the values
 * it allows are set in *bits.  Returns whether it starts with "*".
 */
static bool
parse_field(const CronParse *p, int f, const char *start, const char *end, uint64 *bits)
{
	const CronField *fd = &fields[f];
	const char *s = start;
	bool		star = (*s == '*');

	*bits = 0;
	for (;;)
	{
		const char *item = s;
		int			lo,
					hi,
					step = 1;

		if (*s == '*')
		{
			lo = fd->min;
			hi = fd->max == 7 ? 6 : fd->max;
			s++;
		}
		else
		{
			lo = hi = parse_value(p, f, &s);
			if (*s == '-')
			{
				const char *h;

				s++;
				h = s;
				hi = parse_value(p, f, &s);
				if (hi < lo)
					cron_error(p, f, h,
							   psprintf("the range %d-%d ends before it starts", lo, hi));
			}
		}
		if (*s == '/')
		{
			const char *st = ++s;

			if (!isdigit((unsigned char) *s))
				cron_error(p, f, st, "a step is a positive number");
			step = 0;
			while (isdigit((unsigned char) *s))
			{
				if (step < 1000)
					step = step * 10 + (*s - '0');
				s++;
			}
			if (step < 1 || step > fd->max - fd->min + 1)
				cron_error(p, f, st,
						   psprintf("step %d is out of range 1-%d", step, fd->max - fd->min + 1));
			/* a/n: from a to the end of the range */
			if (lo == hi && item[0] != '*')
				hi = fd->max == 7 ? 6 : fd->max;
		}
		for (int v = lo; v <= hi; v += step)
			*bits |= UINT64CONST(1) << (f == 4 && v == 7 ? 0 : v);
		if (s == end)
			break;
		if (*s != ',')
			cron_error(p, f, s, psprintf("unexpected \"%c\"", *s));
		s++;
		if (s == end)
			cron_error(p, f, s, "a value is missing after \",\"");
	}
	return star;
}

/*
 * Parse a cron expression into *cron; a malformed one is an error (22023)
 * saying which field and position are wrong.
 */
void
dex_cron_parse(const char *expr, DexCron *cron)
{
	CronParse	p = {expr, expr, 0};
	const char *s;
	const char *start[5];
	const char *end[5];
	int			n = 0;
	uint64		bits[5];

	memset(cron, 0, sizeof(*cron));
	s = expr;
	while (isspace((unsigned char) *s))
		s++;
	if (*s == '@')
	{
		const char *e = s;
		int			len;

		while (*e && !isspace((unsigned char) *e))
			e++;
		len = (int) (e - s);
		for (int i = 0; i < lengthof(shorthands); i++)
			if (strlen(shorthands[i].name) == len && pg_strncasecmp(s, shorthands[i].name, len) == 0)
			{
				p.text = shorthands[i].expr;
				break;
			}
		if (p.text == expr)
			cron_error(&p, -1, s, psprintf("Unknown shorthand \"%s\"", pnstrdup(s, len)));
		while (isspace((unsigned char) *e))
			e++;
		if (*e)
			cron_error(&p, -1, e, psprintf("Unexpected \"%s\" after the shorthand", e));
		s = p.text;
	}
	while (*s)
	{
		if (n == 5)
			cron_error(&p, -1, s, "A cron expression has five fields (minute, hour, day of month, month, day of week); this one has more");
		start[n] = s;
		while (*s && !isspace((unsigned char) *s))
			s++;
		end[n++] = s;
		while (isspace((unsigned char) *s))
			s++;
	}
	if (n < 5)
		cron_error(&p, -1, s,
				   psprintf("A cron expression has five fields (minute, hour, day of month, month, day of week); this one has %d", n));
	for (int f = 0; f < 5; f++)
	{
		bool		star = parse_field(&p, f, start[f], end[f], &bits[f]);

		if (f == 2)
			cron->mday_star = star;
		else if (f == 4)
			cron->wday_star = star;
	}
	cron->minutes = bits[0];
	cron->hours = (uint32) bits[1];
	cron->mdays = (uint32) bits[2];
	cron->months = (uint16) bits[3];
	cron->wdays = (uint8) bits[4];
}

/*
 * The time zone of that name (pg_tzset: IANA names such as
 * "Europe/Berlin", "UTC", POSIX specifications); an unknown one is 22023.
 */
pg_tz *
dex_time_zone(const char *name)
{
	pg_tz	   *tz = pg_tzset(name);

	if (tz == NULL || !pg_tz_acceptable(tz))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("time zone \"%s\" not recognized", name),
				 errhint("Use a name of pg_timezone_names, such as \"Europe/Berlin\" or \"UTC\".")));
	return tz;
}

static int
days_in_month(int y, int m)
{
	static const int days[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};

	return m == 2 && isleap(y) ? 29 : days[m - 1];
}

/* seconds east of UTC in zone tz at instant t */
static long
gmtoff_at(pg_time_t t, pg_tz *tz)
{
	return pg_localtime(&t, tz)->tm_gmtoff;
}

/*
 * The earliest instant at which the wall clock of zone tz shows local time
 * "local" (seconds since 1970-01-01 00:00 of that wall clock); false if it
 * shows it at no instant (the clocks skip it).  The offsets in force a day
 * before and a day after are the only ones it can have (zones change their
 * offset at most once in two days).
 */
static bool
local_to_instant(pg_time_t local, pg_tz *tz, pg_time_t *instant)
{
	long		offsets[2] = {gmtoff_at(local - SECS_PER_DAY, tz), gmtoff_at(local + SECS_PER_DAY, tz)};
	bool		found = false;

	for (int i = 0; i < 2; i++)
	{
		pg_time_t	u = local - offsets[i];

		if (gmtoff_at(u, tz) == offsets[i] && (!found || u < *instant))
		{
			*instant = u;
			found = true;
		}
	}
	return found;
}

static bool
day_matches(const DexCron *cron, int y, int m, int d)
{
	bool		mday = (cron->mdays & (((uint32) 1) << d)) != 0;
	bool		wday = (cron->wdays & (1 << j2day(date2j(y, m, d)))) != 0;

	if (cron->mday_star || cron->wday_star)
		return mday && wday;
	return mday || wday;
}

/* the years the search for a next time looks ahead (Feb 29 on a weekday: 28) */
#define CRON_SEARCH_YEARS 30

/*
 * The first instant after "after" at which the expression fires in zone
 * tz; false if it fires at none in the next CRON_SEARCH_YEARS years (as
 * "0 0 30 2 *").
 */
bool
dex_cron_next(const DexCron *cron, pg_tz *tz, TimestampTz after, TimestampTz *next)
{
	pg_time_t	t;
	struct pg_tm *tm;
	int			y,
				mon,
				d,
				h,
				mi,
				last_year;

	if (TIMESTAMP_NOT_FINITE(after))
		return false;
	t = timestamptz_to_time_t(after);
	if (after < 0 && after % USECS_PER_SEC != 0)
		t--;					/* floor */
	tm = pg_localtime(&t, tz);
	if (tm == NULL)
		return false;
	y = tm->tm_year + 1900;
	mon = tm->tm_mon + 1;
	d = tm->tm_mday;
	h = tm->tm_hour;
	mi = tm->tm_min + 1;
	last_year = y + CRON_SEARCH_YEARS;

	for (;;)
	{
		/* carry */
		if (mi > 59)
			mi = 0, h++;
		if (h > 23)
			h = 0, d++;
		if (d > days_in_month(y, mon))
			d = 1, mon++;
		if (mon > 12)
			mon = 1, y++;
		if (y > last_year)
			return false;

		if (!(cron->months & (1 << mon)))
		{
			mon++, d = 1, h = 0, mi = 0;
			continue;
		}
		if (!day_matches(cron, y, mon, d))
		{
			d++, h = 0, mi = 0;
			continue;
		}
		if (!(cron->hours & (((uint32) 1) << h)))
		{
			h++, mi = 0;
			continue;
		}
		if (!(cron->minutes & (UINT64CONST(1) << mi)))
		{
			mi++;
			continue;
		}
		{
			pg_time_t	local = (pg_time_t) (date2j(y, mon, d) - UNIX_EPOCH_JDATE) * SECS_PER_DAY +
				h * SECS_PER_HOUR + mi * SECS_PER_MINUTE;
			pg_time_t	u = 0;

			if (local_to_instant(local, tz, &u))
			{
				TimestampTz cand = time_t_to_timestamptz(u);

				if (cand > after)
				{
					*next = cand;
					return true;
				}
			}
			mi++;
		}
	}
}
