package daemon

import (
	"strings"
	"testing"
)

// [metrics]: off by default; listen only on loopback, anything else one
// line naming the key (serve exits 2 on it, as on any config error).
func TestMetricsConfig(t *testing.T) {
	c, err := ParseConfig("cfg.toml", nil)
	if err != nil || c.Metrics.Listen != "" || DefaultConfig().Metrics.Listen != "" {
		t.Fatalf("default [metrics]: %v %+v", err, c.Metrics)
	}
	for _, ok := range []string{"127.0.0.1:9464", "[::1]:9464", "localhost:0"} {
		c, err := ParseConfig("cfg.toml", []byte("[metrics]\nlisten = \""+ok+"\"\n"))
		if err != nil || c.Metrics.Listen != ok || !c.Set("metrics.listen") {
			t.Errorf("listen %s: %v %+v", ok, err, c.Metrics)
		}
	}
	for _, bad := range []string{"0.0.0.0:9464", ":9464", "192.168.0.7:9464", "metrics.example:9464", "9464"} {
		_, err := ParseConfig("cfg.toml", []byte("[metrics]\nlisten = \""+bad+"\"\n"))
		if err == nil || strings.Count(err.Error(), "\n") != 0 || !strings.HasPrefix(err.Error(), "cfg.toml: metrics.listen ") {
			t.Errorf("listen %q: %v, want one line naming metrics.listen", bad, err)
		}
	}
	if _, err := ParseConfig("cfg.toml", []byte("[metrics]\nlisten = \"127.0.0.1:9464\"\nport = 1\n")); err == nil ||
		err.Error() != "cfg.toml: unknown key metrics.port" {
		t.Errorf("unknown key: %v", err)
	}
}
