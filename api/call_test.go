package api_test

import (
	"strings"
	"testing"

	"github.com/orchestrd/orchestrd/api"
	"github.com/orchestrd/orchestrd/api/apitest"
)

// DecodeID passes params that name an id; it fails the call, naming the
// method, when they name none, and with the decoder's error when they do
// not decode.
func TestDecodeID(t *testing.T) {
	type params struct {
		ID string `json:"id"`
	}
	for _, c := range []struct {
		params string
		ok     bool
		want   string // in the error
	}{
		{`{"id":"x-1"}`, true, ""},
		{`{}`, false, "thing.get: id is missing"},
		{``, false, "thing.get: id is missing"},
		{`{"id":"x-1","other":1}`, false, "other"},
		{`{"id":7}`, false, "id"},
	} {
		call := apitest.NewCall("thing.get", []byte(c.params))
		var p params
		ok := api.DecodeID(call, &p, &p.ID)
		if ok != c.ok || ok && (p.ID != "x-1" || call.Answered()) {
			t.Fatalf("%s: DecodeID = %v (%+v, answered %v), want %v", c.params, ok, p, call.Answered(), c.ok)
		}
		if ok {
			continue
		}
		if e := call.Err(); e == nil || e.Code != api.CodeInvalidParams || !strings.Contains(e.Message, c.want) {
			t.Fatalf("%s: failed with %+v, want invalid params saying %q", c.params, e, c.want)
		}
	}
}
