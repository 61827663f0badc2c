package state

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

func hash32(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }

// TestUISessionsSurviveReopen: a stored session is read back after the
// store is closed and opened again; a prune drops the ended ones and
// another key's, and a delete drops one.
func TestUISessionsSurviveReopen(t *testing.T) {
	path := dbPath(t)
	st := openT(t, path, Options{})
	rows := []UISessionRow{
		{TokenHash: hash32(1), ID: "aaaa", KeyID: "k1", Created: 1000, Expires: 5000},
		{TokenHash: hash32(2), ID: "bbbb", KeyID: "k1", Created: 2000, Expires: 3000},
		{TokenHash: hash32(3), ID: "cccc", KeyID: "k0", Created: 2500, Expires: 9000},
		{TokenHash: hash32(4), ID: "dddd", KeyID: "k1", Created: 2600, Expires: 9000},
	}
	for _, r := range rows {
		if err := st.Do(ctx, UISessionPut(r)); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st = openT(t, path, Options{})
	got, err := st.UISessions().All()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, rows) {
		t.Fatalf("read back %+v, want %+v", got, rows)
	}
	if err := st.Do(ctx, UISessionsPruned(3000, "k1"), UISessionDeleted(hash32(4))); err != nil {
		t.Fatal(err)
	}
	got, err = st.UISessions().All()
	if err != nil {
		t.Fatal(err)
	}
	if want := rows[:1]; !reflect.DeepEqual(got, want) {
		t.Fatalf("after the prune and delete %+v, want %+v", got, want)
	}
}

func TestUISessionsBadInput(t *testing.T) {
	st := openT(t, dbPath(t), Options{})
	for name, w := range map[string]Write{
		"short hash": UISessionPut(UISessionRow{TokenHash: []byte("x"), ID: "a", KeyID: "k", Created: 1, Expires: 2}),
		"no id":      UISessionPut(UISessionRow{TokenHash: hash32(1), KeyID: "k", Created: 1, Expires: 2}),
		"ends early": UISessionPut(UISessionRow{TokenHash: hash32(1), ID: "a", KeyID: "k", Created: 2, Expires: 2}),
		"no key id":  UISessionsPruned(1, ""),
		"delete":     UISessionDeleted(nil),
	} {
		err := st.Do(ctx, w)
		if err == nil || errors.Is(err, ErrClosed) {
			t.Errorf("%s: want an error, got %v", name, err)
		}
	}
}
