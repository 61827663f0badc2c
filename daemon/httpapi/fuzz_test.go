package httpapi

import (
	"encoding/json"
	"strings"
	"testing"
)

// FuzzParseExecute: any body decodes into params that pass their check,
// or is refused with an error; never a panic. What passes has a command
// and a timeout a job can take.
func FuzzParseExecute(f *testing.F) {
	for _, s := range []string{`{"command":"ls","args":["-la"],"cwd":"/tmp","timeout":30000}`, `{"command":""}`,
		`{"command":"x","timeout":-1}`, `{"command":"x","timeout":1e300}`, `[]`, `{"command":"a\u0000b"}`, `{"command":"x","env":{"A":"1"}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := parseExecute(b)
		if err != nil {
			return
		}
		if p.Command == "" || (p.Timeout != nil && *p.Timeout <= 0) {
			t.Fatalf("%q passed: %+v", b, p)
		}
		if _, err := json.Marshal(p); err != nil {
			t.Fatal(err)
		}
	})
}

func TestValidate(t *testing.T) {
	c := DefaultConfig()
	if errs := Validate("http", c, []string{"net"}, false); len(errs) != 0 {
		t.Fatalf("defaults: %v", errs)
	}
	// The default exec_lane need not be a lane (/execute is then off);
	// one the file sets must be.
	if errs := Validate("http", c, []string{"gpu"}, false); len(errs) != 0 {
		t.Fatalf("the default exec_lane, no net lane: %v", errs)
	}
	if off := ExecOff(c, []string{"gpu"}); !strings.Contains(off, "set [http] exec_lane") {
		t.Fatalf("ExecOff: %q", off)
	}
	c.ExecLane = "nope"
	if errs := Validate("http", c, []string{"gpu", "net"}, true); len(errs) != 1 ||
		errs[0].Error() != `http.exec_lane "nope" is not a lane (the lanes: gpu, net)` {
		t.Fatalf("an exec_lane set to no lane: %v", errs)
	}
	c.ExecLane = "net"
	c.Listen, c.Cert, c.MaxConcurrent = "nope", "/c.pem", 0
	c.AllowedKeys = map[string]string{"pc": "short"}
	if errs := Validate("http", c, []string{"net"}, true); len(errs) != 4 {
		t.Fatalf("want 4 errors, got %v", errs)
	}
}
