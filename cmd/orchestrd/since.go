package main

import (
	"fmt"
	"time"
)

// sinceForms says what every --since takes, for the commands' help.
const sinceForms = "a duration ago (90s, 5m, 2h), an RFC 3339\ntime (2025-11-21T03:00:00Z) or a local clock time today (03:00, 03:00:30)"

// parseSince reads a --since (flag names it in the error): a duration ago,
// an RFC 3339 time, or a clock time today in loc (yesterday if that is
// still in the future). Every command that takes --since reads it here,
// before it asks the daemon, so a bad one is a usage error everywhere.
func parseSince(flag, s string, now time.Time, loc *time.Location) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			d = -d
		}
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	for _, layout := range []string{"15:04:05", "15:04"} {
		if c, err := time.ParseInLocation(layout, s, loc); err == nil {
			n := now.In(loc)
			t := time.Date(n.Year(), n.Month(), n.Day(), c.Hour(), c.Minute(), c.Second(), 0, loc)
			if t.After(n) {
				t = t.AddDate(0, 0, -1)
			}
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("bad %s %q: want a duration ago (5m, 2h), an RFC 3339 time (2025-11-21T03:00:00Z) or a clock time (03:00)", flag, s)
}
