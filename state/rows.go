package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// The reads every table's records share: a query's rows handed to a scan
// function, rows of one JSON record each, and a list's query text.

// errStopScan, from a scan function, ends a query early without an error.
var errStopScan = errors.New("stop the scan")

// listQuery is a list's query: sel, where's conditions (all of them),
// the order, and a LIMIT of limit (none when limit is 0), added to args.
func listQuery(sel string, where []string, order string, limit int, args []any) (string, []any) {
	query := sel
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	query += " ORDER BY " + order
	if limit > 0 {
		query += " LIMIT ?"
		args = append(args, limit)
	}
	return query, args
}

// query runs a read (its statement prepared once) and hands each row to
// scan; what says what was being read in an error. errStopScan from scan
// ends the rows early without one.
func (s *Store) query(what, query string, scan func(scanner) error, args ...any) error {
	st, err := s.read(query)
	if err != nil {
		return s.readErr(what, err)
	}
	rows, err := st.QueryContext(bg, args...)
	if err != nil {
		return s.readErr(what, err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); errors.Is(err, errStopScan) {
			return nil
		} else if err != nil {
			return s.readErr(what, err)
		}
	}
	if err := rows.Err(); err != nil {
		return s.readErr(what, err)
	}
	return nil
}

// jsonRows runs a read whose rows are one JSON text each (a record
// column) and decodes each into a T; noun names one in a decoding error
// ("a task record").
func jsonRows[T any](s *Store, what, noun, query string, args ...any) ([]T, error) {
	out := []T{}
	err := s.query(what, query, func(sc scanner) error {
		var rec string
		if err := sc.Scan(&rec); err != nil {
			return err
		}
		var v T
		if err := json.Unmarshal([]byte(rec), &v); err != nil {
			return fmt.Errorf("decoding %s: %w", noun, err)
		}
		out = append(out, v)
		return nil
	}, args...)
	return out, err
}
