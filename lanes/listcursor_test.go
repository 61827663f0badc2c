package lanes

import (
	"errors"
	"testing"
	"time"

	"github.com/orchestrd/orchestrd/api"
)

func TestListCursor(t *testing.T) {
	at := time.Date(2026, 11, 27, 8, 0, 0, 123456789, time.UTC)
	for _, c := range []struct {
		cur  listCursor
		text string
	}{
		{listCursor{}, "m."},
		{listCursor{local: "42"}, "m42."},
		{listCursor{localDone: true}, "mx."},
		{listCursor{fleetDone: true}, "m.x"},
		{listCursor{local: "7", fleetAfter: &api.JobRecord{ID: "c-abc-3", CreatedAt: at}}, "m7.1795766400123456789_c-abc-3"},
		{listCursor{localDone: true, fleetAfter: &api.JobRecord{ID: "c-abc-3", CreatedAt: at}}, "mx.1795766400123456789_c-abc-3"},
	} {
		if got := c.cur.String(); got != c.text {
			t.Errorf("%+v: %q, want %q", c.cur, got, c.text)
		}
		back, err := parseListCursor(c.text)
		if err != nil {
			t.Errorf("parse %q: %v", c.text, err)
			continue
		}
		if back.String() != c.text {
			t.Errorf("parse %q: back as %q", c.text, back.String())
		}
		if c.cur.fleetAfter != nil && (back.fleetAfter == nil || !back.fleetAfter.CreatedAt.Equal(at) || back.fleetAfter.ID != "c-abc-3") {
			t.Errorf("parse %q: fleet place %+v", c.text, back.fleetAfter)
		}
	}
	// The store's own cursor, as a node without a fleet gives it.
	if c, err := parseListCursor("17"); err != nil || c.local != "17" || c.localDone || c.fleetDone || c.fleetAfter != nil {
		t.Errorf(`parse "17": %+v, %v`, c, err)
	}
	for _, bad := range []string{"0", "-3", "017", "x", "m", "mx.x", "m1", "m1.2", "m1.2_j-1", "ma.", "m.x_c-1", "m._c-1",
		"m.5_", "m.5_c-" + string(make([]byte, 70)), "1.", " m.", "m.-"} {
		_, err := parseListCursor(bad)
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Code != api.CodeInvalidParams {
			t.Errorf("parse %q: %v, want an invalid-params error", bad, err)
		}
	}
}

// FuzzListCursor: a cursor parsed is given back as itself (a merged one)
// or as its store part (the store's own), and nothing panics.
func FuzzListCursor(f *testing.F) {
	for _, s := range []string{"", "5", "m.", "m5.x", "mx.17_c-a-1", "m.1795766400123456789_c-abc-3", "m12.-5_c-z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := parseListCursor(s)
		if err != nil {
			return
		}
		if s == "" || s[0] != 'm' {
			if c.local != s {
				t.Fatalf("%q: store cursor %q", s, c.local)
			}
			return
		}
		if c.String() != s {
			t.Fatalf("%q given back as %q", s, c.String())
		}
	})
}
